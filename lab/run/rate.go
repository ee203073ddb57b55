package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/lab/topology"
	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

// Rate configures open-loop measurements with `strait load rate`
// (wrk2-like): for every workload, payload and target rate, requests at
// that constant rate over Connections keep-alive connections for Duration
// after Warmup, latency measured from each request's intended start
// (corrected for coordinated omission) into an HDR histogram.
//
//	rate:
//	  rps: [1000, 10000]           # target rates, requests/s over all connections
//	  connections: 100
//	  duration: 10s
//	  warmup: 2s
//	  workloads:
//	    - {name: echo, payloads: [1KB]}
type Rate struct {
	RPS             Rates      `yaml:"rps" json:"rps"`
	Connections     int        `yaml:"connections" json:"connections"`
	Duration        string     `yaml:"duration" json:"duration"`
	Warmup          string     `yaml:"warmup" json:"warmup"`
	ResponseTimeout string     `yaml:"response-timeout" json:"response-timeout,omitempty"`
	Workloads       []Workload `yaml:"workloads" json:"workloads"`

	duration, warmup time.Duration
	// roundTrips is each scenario's base round trip between client and
	// server (pathRoundTrip), set by Experiment.resolve.
	roundTrips map[string]time.Duration
}

// rateHeadroom is how many times the connections needed to carry a rate
// at the path's bare round trip a rate cell opens at least. Each
// connection carries one request per round trip (no pipelining, as
// wrk2), so C connections over a round trip R cap the offered load at
// C/R: 100 connections at cloud10's 10 ms carry at most 10 000
// requests/s, and at exactly the target rate any jitter, loss recovery or
// tool latency queues requests behind each other, so the cell measures a
// saturated queue instead of the path. Twice the minimum keeps each
// connection busy half the time at most.
const rateHeadroom = 2

// rateConnections is the connections a cell at rps requests/s opens over
// a path of round trip rtt: the experiment's least, raised to
// rateHeadroom × rps × rtt, and at most load.MaxConnections.
func rateConnections(least int, rps float64, rtt time.Duration) int {
	// The small subtraction keeps an exact product (2 × 10 000 × 10 ms)
	// from rounding up past it on float error.
	need := math.Ceil(rateHeadroom*rps*rtt.Seconds() - 1e-9)
	if need > load.MaxConnections {
		return load.MaxConnections
	}
	return max(least, int(need))
}

// connections is the connections the scenario's cells at rps open.
func (r *Rate) connections(scenario string, rps float64) int {
	return rateConnections(r.Connections, rps, r.roundTrips[scenario])
}

// notes says, for every scenario and rate whose cells open more
// connections than the experiment's least, how many and why, so a run at
// a far scenario tells what it measured over.
func (r *Rate) notes(scenarios []string) []string {
	var out []string
	for _, sc := range scenarios {
		for _, rps := range r.RPS {
			n := r.connections(sc, rps)
			need := rateHeadroom * rps * r.roundTrips[sc].Seconds()
			switch {
			case need > float64(n):
				out = append(out, fmt.Sprintf("rate: %s's round trip is %v: %v requests/s need %.0f connections, more than the %d one run may open; expect the cells to fall short of the rate",
					sc, r.roundTrips[sc], rps, need, n))
			case n > r.Connections:
				out = append(out, fmt.Sprintf("rate: %s's round trip is %v: %v requests/s run over %d connections, not %d (each carries one request per round trip; rate.connections is the least)",
					sc, r.roundTrips[sc], rps, n, r.Connections))
			}
		}
	}
	return out
}

// pathRoundTrip is the delay the lab's links add to a packet from client
// to server and back, following the plan's routes (where they split, the
// slower branch): the round trip before any jitter, loss or tool. It is
// the scenario's path (lab/scenario Path: LAN, WAN, LAN) on the built-in
// topologies, and whatever the topology file declares for the
// as-declared scenario.
func pathRoundTrip(p *topology.Plan, client, server string) (time.Duration, error) {
	there, err := pathDelay(p, client, server)
	if err != nil {
		return 0, err
	}
	back, err := pathDelay(p, server, client)
	if err != nil {
		return 0, err
	}
	return there + back, nil
}

// pathDelay is the one-way delay from node from to node to along the
// plan's routes.
func pathDelay(p *topology.Plan, from, to string) (time.Duration, error) {
	dst, ok := p.Node(to)
	if !ok {
		return 0, fmt.Errorf("path delay: no node %s", to)
	}
	var walk func(id string, hops int) (time.Duration, error)
	walk = func(id string, hops int) (time.Duration, error) {
		if id == dst.ID {
			return 0, nil
		}
		n, ok := p.Node(id)
		if !ok {
			return 0, fmt.Errorf("path delay: no node %s", id)
		}
		if hops > len(p.Nodes) {
			return 0, fmt.Errorf("path delay from %s to %s: the routes loop", from, to)
		}
		i := slices.IndexFunc(n.Routes, func(rt topology.Route) bool { return rt.Dst.Contains(dst.Addr) })
		if i < 0 || len(n.Routes[i].NextHops) == 0 {
			return 0, fmt.Errorf("path delay: %s has no route to %s", id, to)
		}
		var slowest time.Duration
		for _, h := range n.Routes[i].NextHops {
			l := slices.IndexFunc(p.Links, func(l topology.PlanLink) bool {
				return l.A.Node == id && l.A.Device == h.Device || l.B.Node == id && l.B.Device == h.Device
			})
			if l < 0 {
				return 0, fmt.Errorf("path delay: %s has no link on device %s", id, h.Device)
			}
			link := p.Links[l]
			out, next := link.AtoB, link.B.Node
			if link.B.Node == id {
				out, next = link.BtoA, link.A.Node
			}
			rest, err := walk(next, hops+1)
			if err != nil {
				return 0, err
			}
			slowest = max(slowest, out.Delay+rest)
		}
		return slowest, nil
	}
	return walk(from, 0)
}

// Rates are target request rates; YAML takes one number or a list.
type Rates []float64

// UnmarshalYAML reads `rps: 10000` as well as `rps: [1000, 10000]`.
func (r *Rates) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var v float64
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: rps %q: want requests per second, one number or a list", n.Line, n.Value)
		}
		*r = Rates{v}
		return nil
	}
	var v []float64
	if err := n.Decode(&v); err != nil {
		return fmt.Errorf("line %d: rps: want requests per second, one number or a list: %w", n.Line, err)
	}
	*r = v
	return nil
}

// Defaults of the rate section: seed 002's 1 KB echo, a warm-up long
// enough to open every connection and warm both Go runtimes.
const (
	defaultRateWarmup = 2 * time.Second
	defaultRatePay    = "1KB"
)

func (r *Rate) validate() error {
	if len(r.RPS) == 0 {
		r.RPS = Rates{load.DefaultRate}
	}
	for i, v := range r.RPS {
		if math.IsNaN(v) || v <= 0 || v > load.MaxRate {
			return fmt.Errorf("rate.rps[%d] %v: must be above 0 and at most %v requests/s", i, v, float64(load.MaxRate))
		}
	}
	if r.Connections == 0 {
		r.Connections = load.DefaultConnections
	}
	if r.Connections < 1 || r.Connections > load.MaxConnections {
		return fmt.Errorf("rate.connections %d: must be between 1 and %d", r.Connections, load.MaxConnections)
	}
	r.duration, r.warmup = load.DefaultDuration, defaultRateWarmup
	for _, f := range []struct {
		name, text string
		to         *time.Duration
		least      time.Duration
	}{{"duration", r.Duration, &r.duration, 100 * time.Millisecond}, {"warmup", r.Warmup, &r.warmup, 0}} {
		if f.text == "" {
			continue
		}
		d, err := emulation.ParseDuration(f.text)
		if err != nil || d < f.least || d > time.Hour {
			return fmt.Errorf("rate.%s %q: want a duration between %v and 1h", f.name, f.text, f.least)
		}
		*f.to = d
	}
	if r.ResponseTimeout != "" {
		if _, err := emulation.ParseDuration(r.ResponseTimeout); err != nil {
			return fmt.Errorf("rate.response-timeout: %w", err)
		}
	}
	if len(r.Workloads) == 0 {
		r.Workloads = []Workload{{Name: "echo", Payloads: []string{defaultRatePay}}}
	}
	for i := range r.Workloads {
		if err := r.Workloads[i].resolve(fmt.Sprintf("rate.workloads[%d]", i)); err != nil {
			return err
		}
		if len(r.Workloads[i].Requests) > 0 {
			return fmt.Errorf("rate.workloads[%d].requests: a rate cell sends for rate.duration; requests counts apply to workloads", i)
		}
	}
	return nil
}

// cells lists the rate cells of one scenario and tool in report order.
func (r *Rate) cells(scenario, tool string) []report.RateCell {
	var cells []report.RateCell
	for _, w := range r.Workloads {
		for _, size := range w.sizes {
			for _, rps := range r.RPS {
				cells = append(cells, report.RateCell{Scenario: scenario, Tool: tool, Workload: w.Name, Payload: size, Rate: rps,
					Connections: r.connections(scenario, rps)})
			}
		}
	}
	return cells
}

func ratePath(dir string, c report.RateCell, rep int) string {
	return filepath.Join(dir, "raw", fmt.Sprintf("%s-%s-rate-%s-%s-%srps-r%d.json",
		c.Scenario, c.Tool, c.Workload, report.FormatSize(c.Payload), strconv.FormatFloat(c.Rate, 'f', -1, 64), rep))
}

// measureRate runs `strait load rate` on the client node for one cell and
// repetition; its JSON (with the latency histogram) stays in raw/.
func (r *runner) measureRate(ctx context.Context, env tool.Env, c report.RateCell, target string, rep int) (*load.RateResult, error) {
	rt := r.e.Rate
	path := ratePath(r.dir, c, rep)
	args := []string{r.opts.Binary, "load", "rate",
		"--url", "http://" + target + "/",
		"--rate", strconv.FormatFloat(c.Rate, 'f', -1, 64),
		"--connections", strconv.Itoa(c.Connections),
		"--duration", rt.duration.String(),
		"--warmup", rt.warmup.String(),
		"--payload", strconv.Itoa(c.Payload),
		"--json", path + ".tmp",
	}
	if rt.ResponseTimeout != "" {
		args = append(args, "--response-timeout", rt.ResponseTimeout)
	}
	if c.Workload == "echo" {
		args = append(args, "--verify-echo")
	}
	cmd, err := env.Lab.Command(ctx, env.Client.ID, args...)
	if err != nil {
		return nil, err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("load rate on %s: %w: %s", env.Client.ID, err, strings.TrimSpace(string(out)))
	}
	res, err := readResult[load.RateResult](path + ".tmp")
	if err != nil {
		return nil, err
	}
	// Renamed only when complete, so a resumed run never reads half a file.
	return res, os.Rename(path+".tmp", path)
}

// readResult decodes the JSON result file a load command wrote
// (load.RateResult, load.StreamResult).
func readResult[T any](path string) (*T, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res T
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return &res, nil
}

// aggregateRate reads every finished rate file and merges each cell's
// repetitions.
func (r *runner) aggregateRate() ([]report.RateSummary, error) {
	if r.e.Rate == nil {
		return nil, nil
	}
	var out []report.RateSummary
	for _, sc := range r.e.scenarios {
		for _, t := range r.e.Tools {
			for _, c := range r.e.Rate.cells(sc.Name, t) {
				var reps []*load.RateResult
				var numbers []int
				var paths []string
				for rep := 1; rep <= r.e.Repetitions; rep++ {
					res, err := readResult[load.RateResult](ratePath(r.dir, c, rep))
					if errors.Is(err, os.ErrNotExist) {
						continue
					}
					if err != nil {
						return nil, err
					}
					reps, numbers = append(reps, res), append(numbers, rep)
					paths = append(paths, ratePath(r.dir, c, rep))
				}
				if len(reps) == 0 {
					continue
				}
				s, err := report.SummarizeRate(c, numbers, reps)
				if err != nil {
					return nil, err
				}
				if s.Usage, err = readUsage(paths); err != nil {
					return nil, err
				}
				out = append(out, s)
			}
		}
	}
	return out, nil
}

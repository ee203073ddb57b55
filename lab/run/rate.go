package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/tool"
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
	}
	return nil
}

// cells lists the rate cells of one scenario and tool in report order.
func (r *Rate) cells(scenario, tool string) []report.RateCell {
	var cells []report.RateCell
	for _, w := range r.Workloads {
		for _, size := range w.sizes {
			for _, rps := range r.RPS {
				cells = append(cells, report.RateCell{Scenario: scenario, Tool: tool, Workload: w.Name, Payload: size, Rate: rps})
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
		"--connections", strconv.Itoa(rt.Connections),
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

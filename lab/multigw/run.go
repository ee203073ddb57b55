package multigw

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/nexthop"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/lab/topology"
	"github.com/strait-net/strait/load"
)

// Options are the runner's settings.
type Options struct {
	Binary string    // the strait executable run on the lab's nodes
	OutDir string    // run directories go here
	Out    io.Writer // progress and tables
	Logger *slog.Logger
}

const (
	probePort  = 7000
	streamPort = 5201
	// excessWindow is how long after a kill the failover's own losses are
	// counted against the loss rate before it.
	excessWindow = 500 * time.Millisecond
	// loadBin is the width of a row in the per-gateway load table.
	loadBin = 250 * time.Millisecond
	// probeTimeout is how long a probe may take before it counts as lost.
	probeTimeout = time.Second
)

// Run runs every unit of e and writes results under a new run directory,
// which it returns.
func Run(ctx context.Context, e *Experiment, name string, opts Options) (string, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	dir, err := runDir(opts.OutDir, name, time.Now())
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if b, err := json.MarshalIndent(e, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "experiment.json"), b, 0o644)
	}
	var results []any
	var errs []error
	for _, n := range e.Gateways {
		r, err := runUnit(ctx, e, n, filepath.Join(dir, fmt.Sprintf("gw%d", n)), opts)
		if err != nil {
			fmt.Fprintf(opts.Out, "%d gateways: %v\n", n, err)
			errs = append(errs, fmt.Errorf("%d gateways: %w", n, err))
		}
		if r != nil {
			results = append(results, r)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if e.Kind == KindAggregate {
		printAggregate(opts.Out, e, results)
	}
	b, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		errs = append(errs, err)
	}
	fmt.Fprintf(opts.Out, "results in %s\n", dir)
	return dir, errors.Join(errs...)
}

// unit is one lab with n gateways per cluster and strait set up in it.
type unit struct {
	lab    *lab.Lab
	ctl    tool.GatewayController
	target string
	client *topology.PlanNode
	server *topology.PlanNode
	dir    string
	opts   Options
	pod    *pod // where the failover's probe client runs (pod.go)
}

func runUnit(ctx context.Context, e *Experiment, n int, dir string, opts Options) (any, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	plan, err := e.Topology(fmt.Sprintf("mg%05x", rand.N(1<<20)), n).Plan()
	if err != nil {
		return nil, err
	}
	lopts := lab.Options{Binary: opts.Binary, Logger: opts.Logger}
	l, err := lab.Up(ctx, plan, lopts)
	if err != nil {
		return nil, fmt.Errorf("lab up: %w", err)
	}
	defer func() {
		if err := lab.Down(context.WithoutCancel(ctx), plan.Name, lopts); err != nil {
			opts.Logger.Warn("lab down", "lab", plan.Name, "err", err)
		}
	}()
	server, _ := plan.Node("a/server")
	client, _ := plan.Node("b/client")
	svc := tool.Service{Name: "probe", Port: probePort}
	argv := []string{opts.Binary, "load", "probe-server", "--listen", net.JoinHostPort(server.Addr.String(), strconv.Itoa(probePort))}
	if e.Kind == KindAggregate {
		svc = tool.Service{Name: "stream", Port: streamPort}
		argv = []string{opts.Binary, "load", "stream-server", "--listen", net.JoinHostPort(server.Addr.String(), strconv.Itoa(streamPort))}
	}
	srv, err := startLogged(ctx, l, server.ID, filepath.Join(dir, "server.log"), argv...)
	if err != nil {
		return nil, err
	}
	defer stopProc(srv)
	if err := waitListening(ctx, l, client.ID, net.JoinHostPort(server.Addr.String(), strconv.Itoa(svc.Port))); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	var direct float64
	if e.Kind == KindAggregate {
		// The same load by plain routing first: the client's routes to the
		// server hash on addresses only, so direct traffic takes one b
		// uplink and one a uplink — what one path of this lab carries on
		// this host now, the baseline for N paths.
		addr := net.JoinHostPort(server.Addr.String(), strconv.Itoa(streamPort))
		if direct, _, err = streamMbps(ctx, l, client.ID, server.Netns, addr, e, filepath.Join(dir, "direct.json"), opts.Binary); err != nil {
			return nil, fmt.Errorf("direct: %w", err)
		}
	}
	tl, err := tool.New(e.tool())
	if err != nil {
		return nil, err
	}
	toolDir := filepath.Join(dir, "tool")
	if err := os.MkdirAll(toolDir, 0o755); err != nil {
		return nil, err
	}
	targets, err := tl.Setup(ctx, tool.Env{Lab: l, Server: server, Client: client, Services: []tool.Service{svc},
		Dir: toolDir, Binary: opts.Binary, Logger: opts.Logger})
	defer func() { _ = tl.Teardown(context.WithoutCancel(ctx)) }()
	if err != nil {
		return nil, fmt.Errorf("%s setup: %w", e.tool(), err)
	}
	u := &unit{lab: l, ctl: tl.(tool.GatewayController), target: targets[svc.Name], client: client, server: server, dir: dir, opts: opts}
	if e.Kind == KindFailover {
		p, err := newPod(ctx, client.Netns)
		defer func() {
			if err := p.close(); err != nil {
				opts.Logger.Warn("pod", "err", err)
			}
		}()
		if err != nil {
			return nil, err
		}
		u.pod = p
	}
	if e.Kind == KindAggregate {
		r, err := u.aggregate(ctx, e, n, direct)
		if r == nil {
			return nil, err // not a typed nil in an interface
		}
		return r, err
	}
	var phases []*FailoverResult
	var errs []error
	for _, v := range e.Victims {
		r, err := u.failover(ctx, e, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("victim %s: %w", v, err))
		}
		if r != nil {
			phases = append(phases, r)
			r.print(opts.Out)
		}
	}
	if len(phases) > 0 {
		if err := writeLoadPage(u.dir, n, phases); err != nil {
			errs = append(errs, err)
		} else {
			fmt.Fprintf(opts.Out, "per-gateway load plots: %s\n", filepath.Join(u.dir, "load.html"))
		}
	}
	return phases, errors.Join(errs...)
}

// AggregateResult is one gateway count of an aggregate experiment.
type AggregateResult struct {
	Gateways   int     `json:"gateways"`
	UplinkMbps float64 `json:"uplink_mbit_s"`
	// Mbps is what the server received in the middle half of the run (IP
	// bytes per second), when every path is busy; StreamMbps is the
	// stream's own figure, all bytes over the time from the first stream's
	// start to the last one's end, which also counts the end of the run
	// when only some paths still drain what the gateways buffered.
	Mbps       float64 `json:"mbit_s"`
	StreamMbps float64 `json:"stream_mbit_s"`
	Goal       float64 `json:"goal_mbit_s"` // 0.9 × N × R
	Ratio      float64 `json:"ratio_to_n_r"`
	// DirectMbps is plain routing over one path of the same lab, measured
	// just before; RatioDirect is Mbps ÷ (N × DirectMbps).
	DirectMbps  float64 `json:"direct_one_path_mbit_s"`
	RatioDirect float64 `json:"ratio_to_n_direct"`
}

func (u *unit) aggregate(ctx context.Context, e *Experiment, n int, direct float64) (*AggregateResult, error) {
	mbps, streamMbit, err := streamMbps(ctx, u.lab, u.client.ID, u.server.Netns, u.target, e, filepath.Join(u.dir, "stream.json"), u.opts.Binary)
	if err != nil {
		return nil, err
	}
	r := &AggregateResult{Gateways: n, Mbps: mbps, StreamMbps: streamMbit, DirectMbps: direct}
	if e.Uplink != nil {
		if p, err := e.Uplink.Params(); err == nil && p.Rate > 0 {
			r.UplinkMbps = float64(p.Rate) / 1e6 // Params.Rate is in bits per second
		}
	}
	if r.UplinkMbps > 0 {
		r.Goal = 0.9 * float64(n) * r.UplinkMbps
		r.Ratio = r.Mbps / (float64(n) * r.UplinkMbps)
	}
	if direct > 0 {
		r.RatioDirect = r.Mbps / (float64(n) * direct)
	}
	fmt.Fprintf(u.opts.Out, "aggregate: %d gateways per cluster: strait %.1f Mbit/s, direct one path %.1f Mbit/s, N×R = %.0f\n", n, r.Mbps, direct, float64(n)*r.UplinkMbps)
	return r, nil
}

// streamMbps runs `strait load stream` from node to addr and returns the
// rate at which the server's namespace received IP bytes in the middle half
// of the run, and the stream's own throughput.
func streamMbps(ctx context.Context, l *lab.Lab, node, serverNetns, addr string, e *Experiment, jsonFile, bin string) (steady, stream float64, err error) {
	cmd, err := l.Command(ctx, node, bin, "load", "stream", "--server", addr,
		"--parallel", strconv.Itoa(e.Stream.Parallel), "--duration", e.Stream.Duration.String(), "--json", jsonFile)
	if err != nil {
		return 0, 0, err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("load stream: %w", err)
	}
	quarter := e.Stream.Duration / 4
	var from, to int64
	var t1, t2 time.Time
	var sampleErr error
	if sleepCtx(ctx, quarter) {
		from, sampleErr = rxBytes(ctx, serverNetns)
		t1 = time.Now()
	}
	if sampleErr == nil && sleepCtx(ctx, 2*quarter) {
		to, sampleErr = rxBytes(ctx, serverNetns)
		t2 = time.Now()
	}
	if err := cmd.Wait(); err != nil {
		return 0, 0, fmt.Errorf("load stream: %w: %s", err, out.String())
	}
	if sampleErr != nil {
		return 0, 0, sampleErr
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		return 0, 0, err
	}
	var res load.StreamResult
	if err := json.Unmarshal(b, &res); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", jsonFile, err)
	}
	if !t2.After(t1) {
		return 0, 0, fmt.Errorf("load stream: interrupted before the second counter sample")
	}
	return float64(to-from) * 8 / t2.Sub(t1).Seconds() / 1e6, res.Gbps * 1000, nil
}

// rxBytes sums the bytes received by every interface in netns but lo.
func rxBytes(ctx context.Context, netns string) (int64, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", netns, "-s", "-j", "link", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("interface counters of %s: %w", netns, err)
	}
	var links []struct {
		Name  string `json:"ifname"`
		Stats struct {
			RX struct {
				Bytes int64 `json:"bytes"`
			} `json:"rx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return 0, fmt.Errorf("interface counters of %s: %w", netns, err)
	}
	var sum int64
	for _, ln := range links {
		if ln.Name != "lo" {
			sum += ln.Stats.RX.Bytes
		}
	}
	return sum, nil
}

func printAggregate(w io.Writer, e *Experiment, results []any) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "gateways\tuplink R (Mbit/s)\tstrait, middle half (Mbit/s)\tN×R\tstrait/(N×R)\tgoal ≥0.9\tdirect 1 path (Mbit/s)\tstrait/(N×direct)\tstrait, whole run incl. drain (Mbit/s)\t")
	for _, x := range results {
		r, ok := x.(*AggregateResult)
		if !ok || r == nil {
			continue
		}
		met := "no"
		if r.Ratio >= 0.9 {
			met = "yes"
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.1f\t%.0f\t%.3f\t%s\t%.1f\t%.3f\t%.1f\t\n", r.Gateways, r.UplinkMbps, r.Mbps, float64(r.Gateways)*r.UplinkMbps, r.Ratio, met, r.DirectMbps, r.RatioDirect, r.StreamMbps)
	}
	tw.Flush()
}

// FailoverResult is one victim's phase of a failover experiment. Every
// window is by the probes' send times (see analyzeFailover).
type FailoverResult struct {
	Victim string `json:"victim"`
	// Fault is what happened to the victim at the kill: FaultKill or
	// FaultUplinkDown, undone at the restart.
	Fault string `json:"fault"`
	Rate  int    `json:"rate"`
	// New connections: probes lost from the kill to the restart, and the
	// recovery time lost ÷ rate.
	NewLostKill int `json:"new_lost_after_kill"`
	// NewLostBefore is the loss before the kill, scaled to the length of
	// the kill → restart window: what an overloaded host loses anyway.
	// NewExcessKillMs is NewLostKill minus it, as recovery time.
	NewLostBefore   float64 `json:"new_lost_before_kill_scaled"`
	NewExcessKillMs float64 `json:"new_excess_recovery_after_kill_ms"`
	// NewLost500 is what was lost in the 500 ms after the kill, and
	// NewExcess500Ms the same above the loss rate before the kill: the
	// failover's own cost when the host drops some connections anyway.
	NewLost500     int     `json:"new_lost_500ms_after_kill"`
	NewExcess500Ms float64 `json:"new_excess_recovery_500ms_after_kill_ms"`
	// The restart's cost, over windows as long as the kill's: lost from the
	// restart for as long as from the kill to the restart (and that as
	// time, and above the rate before the kill), and the same for the
	// 500 ms after the restart. NewLostRestart counts everything sent after
	// the restart until the end of the run, a longer window when the
	// sender fell behind.
	NewLostRestartWin     int     `json:"new_lost_after_restart_window"`
	NewRecoveryRestMs     float64 `json:"new_recovery_after_restart_ms"`
	NewExcessRestartMs    float64 `json:"new_excess_recovery_after_restart_ms"`
	NewLost500Restart     int     `json:"new_lost_500ms_after_restart"`
	NewExcess500RestartMs float64 `json:"new_excess_recovery_500ms_after_restart_ms"`
	NewLostRestart        int     `json:"new_lost_after_restart_to_end"`
	NewRecoveryKillMs     float64 `json:"new_recovery_after_kill_ms"`
	NewSent               int     `json:"new_sent"`
	StreamSent            int     `json:"stream_sent"`
	// Long-lived connections (each reconnection is a connection of its
	// own): those that broke within the probe timeout of the kill (they
	// ran through the victim) and those that broke at another time.
	BrokenConns  int `json:"stream_conns_broken"`
	BrokenOther  int `json:"stream_conns_broken_not_by_kill"`
	Conns        int `json:"stream_conns"`
	LostOnBroken int `json:"stream_lost_on_broken_conns"`
	// LostOnSurvivors counts probes lost on every other connection, and
	// LateOnSurvivors those of them whose reply came after the timeout.
	LostOnSurvivors  int     `json:"stream_lost_on_surviving_conns"`
	LateOnSurvivors  int     `json:"stream_late_on_surviving_conns"`
	StreamRecoveryMs float64 `json:"stream_recovery_ms"`
	// How far behind its schedule the probe sender ran (sendLate).
	NewSendLateP99Ms    float64 `json:"new_send_late_p99_ms"`
	NewSendLateMaxMs    float64 `json:"new_send_late_max_ms"`
	StreamSendLateP99Ms float64 `json:"stream_send_late_p99_ms"`
	StreamSendLateMaxMs float64 `json:"stream_send_late_max_ms"`
	KillOffsetMs        float64 `json:"kill_ms"`
	RestartOffsetMs     float64 `json:"restart_ms"`
	// RejoinPauseMs is the experiment's rejoin-pause; the windows after the
	// restart start at its end. BucketsAtResume and BucketsAtEnd are the
	// client's nexthop buckets per importing gateway just before the new
	// connections resumed and at the end of the run (only with a pause).
	RejoinPauseMs   float64        `json:"rejoin_pause_ms,omitempty"`
	BucketsAtResume map[string]int `json:"client_buckets_at_resume,omitempty"`
	BucketsAtEnd    map[string]int `json:"client_buckets_at_end,omitempty"`
	GatewayLoad     []LoadRow      `json:"gateway_load"`
	Gateways        []string       `json:"gateways"`
}

// LoadRow is one time bin of new streams per second per gateway.
type LoadRow struct {
	at     time.Time
	AtMs   float64   `json:"at_ms"`
	PerSec []float64 `json:"streams_per_s"`
}

func (u *unit) failover(ctx context.Context, e *Experiment, victim string) (*FailoverResult, error) {
	pdir := filepath.Join(u.dir, strings.ReplaceAll(victim, "/", "-"))
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return nil, err
	}
	p := e.Probe
	sampler := u.sample(ctx)
	start := time.Now()
	csvFile := filepath.Join(pdir, "probes.csv")
	type done struct {
		out []byte
		err error
	}
	probeDone := make(chan done, 1)
	go func() {
		argv := []string{u.opts.Binary, "load", "probe", "--addr", u.target, "--rate", strconv.Itoa(p.Rate),
			"--streams", strconv.Itoa(p.Streams), "--duration", p.Duration.String(), "--timeout", probeTimeout.String(), "--csv", csvFile}
		if p.RejoinPause > 0 {
			argv = append(argv, "--new-pause-at", p.RestartAt.String(), "--new-pause-for", p.RejoinPause.String())
		}
		out, err := u.pod.command(ctx, argv...).CombinedOutput()
		probeDone <- done{out, err}
	}()
	var killAt, restartAt time.Time
	var evErr error
	var linkUp func(context.Context) error
	if sleepCtx(ctx, time.Until(start.Add(p.KillAt))) {
		killAt = time.Now()
		if e.fault() == FaultUplinkDown {
			linkUp, evErr = uplinkDown(ctx, u.lab.Plan, victim)
		} else {
			evErr = u.ctl.Kill(victim)
		}
	}
	if evErr == nil && sleepCtx(ctx, time.Until(start.Add(p.RestartAt))) {
		restartAt = time.Now()
		if linkUp != nil {
			evErr, linkUp = linkUp(ctx), nil
		} else {
			evErr = u.ctl.Restart(ctx, victim)
		}
	}
	if linkUp != nil { // cancelled while down: the next phase needs it up
		evErr = errors.Join(evErr, linkUp(context.WithoutCancel(ctx)))
	}
	resumeAt := restartAt
	var bucketsAtResume, bucketsAtEnd map[string]int
	if p.RejoinPause > 0 && evErr == nil {
		// What the pause gave the returning gateway, read just before
		// the new connections resume.
		if sleepCtx(ctx, time.Until(start.Add(p.RestartAt+p.RejoinPause-20*time.Millisecond))) {
			bucketsAtResume = u.buckets(ctx)
		}
		resumeAt = start.Add(p.RestartAt + p.RejoinPause)
	}
	d := <-probeDone
	if p.RejoinPause > 0 {
		bucketsAtEnd = u.buckets(ctx)
	}
	loads, names := sampler()
	_ = os.WriteFile(filepath.Join(pdir, "probe.out"), d.out, 0o644)
	if d.err != nil {
		return nil, fmt.Errorf("load probe: %w: %s", d.err, d.out)
	}
	if evErr != nil {
		return nil, evErr
	}
	samples, err := readProbeCSV(csvFile)
	if err != nil {
		return nil, err
	}
	r := analyzeFailover(samples, killAt, restartAt, resumeAt, p.Rate, probeTimeout)
	r.Victim, r.Fault, r.Gateways = victim, e.fault(), names
	r.RejoinPauseMs, r.BucketsAtResume, r.BucketsAtEnd = ms(p.RejoinPause), bucketsAtResume, bucketsAtEnd
	r.KillOffsetMs, r.RestartOffsetMs = ms(killAt.Sub(start)), ms(restartAt.Sub(start))
	for _, row := range loads {
		row.AtMs = ms(row.at.Sub(start))
		r.GatewayLoad = append(r.GatewayLoad, row)
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	_ = os.WriteFile(filepath.Join(pdir, "result.json"), b, 0o644)
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// buckets counts the client's nexthop buckets per importing gateway (nil
// when they cannot be read: the figure is a diagnosis, not a result).
func (u *unit) buckets(ctx context.Context) map[string]int {
	members, gws, err := nexthop.LabMembers(u.lab.Plan, u.client.ID, 0)
	if err != nil {
		return nil
	}
	read := func(args ...string) string {
		cmd, err := u.lab.Command(ctx, u.client.ID, append([]string{"ip"}, args...)...)
		if err != nil {
			return ""
		}
		out, _ := cmd.Output()
		return string(out)
	}
	via := map[int]string{} // nexthop ID → gateway
	for _, m := range nexthopRE.FindAllStringSubmatch(read("nexthop", "show"), -1) {
		id, _ := strconv.Atoi(m[1])
		for i, mem := range members {
			if mem.Via.String() == m[2] {
				via[id] = gws[i].ID
			}
		}
	}
	owners, err := nexthop.ParseBuckets(read("nexthop", "bucket", "show", "id", strconv.Itoa(clientGroupID)))
	if err != nil || len(owners) == 0 {
		return nil
	}
	out := map[string]int{}
	for _, g := range gws {
		out[g.ID] = 0
	}
	for _, id := range owners {
		out[via[id]]++
	}
	return out
}

// clientGroupID is the nexthop group the lab's watcher installs on the
// client (nexthop.Config's default ID).
const clientGroupID = 100

var nexthopRE = regexp.MustCompile(`(?m)^id (\d+) via (\S+)`)

func formatBuckets(b map[string]int) string {
	if b == nil {
		return "unread"
	}
	keys := slices.Sorted(maps.Keys(b))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, b[k])
	}
	return strings.Join(parts, ", ")
}

func (r *FailoverResult) print(w io.Writer) {
	what := fmt.Sprintf("kill -9 %s at %.0f ms, restart at %.0f ms", r.Victim, r.KillOffsetMs, r.RestartOffsetMs)
	if r.Fault == FaultUplinkDown {
		what = fmt.Sprintf("uplink of %s down at %.0f ms, up at %.0f ms", r.Victim, r.KillOffsetMs, r.RestartOffsetMs)
	}
	fmt.Fprintf(w, "\nfailover: %s; probes %d/s per mode\n", what, r.Rate)
	fmt.Fprintf(w, "  new connections: %d sent; lost from the kill to the restart %d → recovery %.1f ms (%.1f ms above the %.0f lost in as long before the kill)\n",
		r.NewSent, r.NewLostKill, r.NewRecoveryKillMs, r.NewExcessKillMs, r.NewLostBefore)
	fmt.Fprintf(w, "  new connections in the 500 ms after the kill: %d lost → %.1f ms above the loss rate before the kill\n", r.NewLost500, r.NewExcess500Ms)
	if r.RejoinPauseMs > 0 {
		fmt.Fprintf(w, "  no new connections for %.0f ms after the restart (rejoin-pause); the client's nexthop buckets per importing gateway then: %s; at the end: %s\n",
			r.RejoinPauseMs, formatBuckets(r.BucketsAtResume), formatBuckets(r.BucketsAtEnd))
	}
	fmt.Fprintf(w, "  new connections after the restart, as long a window: %d lost → %.1f ms (%.1f ms above the rate before the kill); in its first 500 ms: %d lost → %.1f ms above; until the end of the run: %d\n",
		r.NewLostRestartWin, r.NewRecoveryRestMs, r.NewExcessRestartMs, r.NewLost500Restart, r.NewExcess500RestartMs, r.NewLostRestart)
	fmt.Fprintf(w, "  established streams: %d sent over %d connections; %d broke at the kill (through %s): %d lost on them; %d broke at another time; lost on all others: %d (%d of them replies after the timeout)\n",
		r.StreamSent, r.Conns, r.BrokenConns, r.Victim, r.LostOnBroken, r.BrokenOther, r.LostOnSurvivors, r.LateOnSurvivors)
	fmt.Fprintf(w, "  probe sender behind schedule: new p99 %.0f ms (max %.0f), stream p99 %.0f ms (max %.0f)", r.NewSendLateP99Ms, r.NewSendLateMaxMs, r.StreamSendLateP99Ms, r.StreamSendLateMaxMs)
	if max(r.NewSendLateP99Ms, r.StreamSendLateP99Ms) > ms(lateWarn) {
		fmt.Fprint(w, " — the host could not keep the schedule; its own losses are in these figures")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "  t (ms)\t")
	for _, g := range r.Gateways {
		fmt.Fprintf(tw, "%s\t", g)
	}
	fmt.Fprintln(tw, "  new streams/s per gateway")
	for _, row := range r.GatewayLoad {
		fmt.Fprintf(tw, "  %.0f\t", row.AtMs)
		for _, v := range row.PerSec {
			fmt.Fprintf(tw, "%.0f\t", v)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// sample polls every importing gateway's admin status until the returned
// function is called, which returns new streams per second per gateway per
// loadBin. An exporting gateway's load is the streams the importing
// gateways opened on it; an importing gateway's is the streams it opened.
func (u *unit) sample(ctx context.Context) func() ([]LoadRow, []string) {
	var importers, exporters []string
	for _, id := range u.ctl.Gateways() {
		if strings.HasPrefix(id, "b/") {
			importers = append(importers, id)
		} else {
			exporters = append(exporters, id)
		}
	}
	slices.Sort(importers)
	slices.Sort(exporters)
	names := append(slices.Clone(exporters), importers...)
	addrOf := map[string]string{} // WAN address → exporter node ID
	for _, id := range exporters {
		n, _ := u.lab.Plan.Node(id)
		addrOf[net.JoinHostPort(n.Addr.String(), strconv.Itoa(tool.GatewayPort))] = id
	}
	sctx, cancel := context.WithCancel(ctx)
	type point struct {
		at     time.Time
		counts map[string]uint64 // cumulative per importer → per exporter
	}
	var points []point
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		clients := map[string]*gateway.AdminClient{}
		for _, id := range importers {
			c := gateway.NewAdminClient(u.ctl.AdminSocket(id))
			defer c.Close()
			clients[id] = c
		}
		for sctx.Err() == nil {
			pt := point{at: time.Now(), counts: map[string]uint64{}}
			for _, id := range importers {
				st, err := clients[id].Status()
				if err != nil {
					continue
				}
				for _, p := range st.Peers {
					for _, g := range p.Gateways {
						// A gateway address that is no exporter of this
						// lab has no column to count in.
						if exp, ok := addrOf[g.Addr]; ok {
							pt.counts[id+">"+exp] = g.Streams
						}
					}
				}
			}
			points = append(points, pt)
			sleepCtx(sctx, loadBin)
		}
	}()
	return func() ([]LoadRow, []string) {
		cancel()
		wg.Wait() // points is the sampler's until here
		var rows []LoadRow
		for i := 1; i < len(points); i++ {
			a, b := points[i-1], points[i]
			dt := b.at.Sub(a.at).Seconds()
			row := LoadRow{at: b.at, PerSec: make([]float64, len(names))}
			for k, v := range b.counts {
				prev, ok := a.counts[k]
				if !ok {
					continue
				}
				if v < prev {
					prev = 0 // a restarted importer counts from zero
				}
				imp, exp, _ := strings.Cut(k, ">")
				inc := float64(v-prev) / dt
				row.PerSec[slices.Index(names, exp)] += inc
				row.PerSec[slices.Index(names, imp)] += inc
			}
			rows = append(rows, row)
		}
		return rows, names
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// proc is a process started on a lab node whose output goes to a file.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited and its log is closed
}

func startLogged(ctx context.Context, l *lab.Lab, node, logFile string, argv ...string) (*proc, error) {
	f, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd, err := l.Command(context.WithoutCancel(ctx), node, argv...)
	if err != nil {
		f.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// stopProc interrupts p and waits for it; one that ignores the interrupt
// for 5 s is killed, so that it does not outlive the lab it ran in.
func stopProc(p *proc) {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// waitListening waits until a TCP connect from node to addr succeeds.
func waitListening(ctx context.Context, l *lab.Lab, node, addr string) error {
	host, port, _ := net.SplitHostPort(addr)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		cmd, err := l.Command(ctx, node, "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%s", host, port))
		if err != nil {
			return err
		}
		if cmd.Run() == nil {
			return nil
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("%s not listening after 10s", addr)
}

// readProbeCSV reads what `strait load probe --csv` wrote.
func readProbeCSV(path string) ([]load.ProbeSample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	samples, err := load.ReadProbeCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return samples, nil
}

// runDir is the run's directory under outDir, made absolute: the gateways'
// configurations name files in it, and a gateway resolves a relative path
// against its configuration's directory, not the lab's working directory.
func runDir(outDir, name string, now time.Time) (string, error) {
	return filepath.Abs(filepath.Join(outDir, fmt.Sprintf("%s-%s", filepath.Base(strings.TrimSuffix(name, ".yaml")), now.UTC().Format("20060102-150405"))))
}

package run

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/scenario"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
	"github.com/strait-net/strait/report/html"
)

// Options are the runner's knobs; the zero value writes under ./results.
type Options struct {
	Binary   string       // strait binary run in the namespaces; empty: this executable
	OutDir   string       // parent of the run directory; empty: "results"
	Resume   string       // an interrupted run's directory to finish instead of starting anew
	Parallel int          // labs measured at once; 0: the experiment's setting
	Emulator string       // emulation backend override
	Version  string       // strait version for the metadata
	Out      io.Writer    // progress and the final table; nil: discard
	Logger   *slog.Logger // nil: discard
	// Backend, when set, runs the units elsewhere than in namespaces of
	// this host (lab/kube: on Kubernetes clusters).
	Backend Backend
}

// Cell identifies one measured combination.
type Cell struct {
	Scenario string `json:"scenario"`
	Tool     string `json:"tool"`
	Workload string `json:"workload"`
	Payload  int    `json:"payload"`
}

// CellResult is the summary of a cell over all its repetitions, with 95 %
// bootstrap intervals of its median and IQR mean and, for tools other than
// direct, its IQR mean and median relative to direct's (the same numbers
// the HTML report shows).
type CellResult struct {
	Cell
	report.Summary
	MedianCI  report.Interval `json:"median_ci_ms"`
	IQRMeanCI report.Interval `json:"iqr_mean_ci_ms"`
	// Ratios to direct; absent for direct and where direct has no times.
	RatioIQRMean   *float64         `json:"ratio_iqr_mean,omitempty"`
	RatioIQRMeanCI *report.Interval `json:"ratio_iqr_mean_ci,omitempty"`
	RatioMedian    *float64         `json:"ratio_median,omitempty"`
	RatioMedianCI  *report.Interval `json:"ratio_median_ci,omitempty"`
	// Usage is the tool's CPU time and peak memory over the cell's
	// measurements (report.Usage says what kernel and emulator mean).
	Usage *report.UsageSummary `json:"usage,omitempty"`
}

// addIntervals bootstraps every cell and its ratio to direct, seeded as the
// HTML report seeds them (report.Bootstrap.CellSeed), so both agree.
func addIntervals(cells []CellResult, times [][]float64) {
	var b report.Bootstrap
	iv := make([]report.CellIntervals, len(cells))
	direct := map[Cell]int{}
	for i, c := range cells {
		iv[i] = b.CellSeed(c.Scenario, c.Tool, c.Workload, c.Payload).Cell(times[i])
		cells[i].MedianCI, cells[i].IQRMeanCI = iv[i].Median, iv[i].IQRMean
		if c.Tool == report.Baseline {
			k := c.Cell
			k.Tool = ""
			direct[k] = i
		}
	}
	for i := range cells {
		c := &cells[i]
		k := c.Cell
		k.Tool = ""
		d, ok := direct[k]
		if !ok || c.Tool == report.Baseline || c.OK == 0 || cells[d].OK == 0 || cells[d].IQRMeanMS == 0 || cells[d].MedianMS == 0 {
			continue
		}
		iqm, med := c.IQRMeanMS/cells[d].IQRMeanMS, c.MedianMS/cells[d].MedianMS
		iqmCI, medCI := b.CellRatio(iv[i], iv[d])
		c.RatioIQRMean, c.RatioMedian, c.RatioIQRMeanCI, c.RatioMedianCI = &iqm, &med, &iqmCI, &medCI
	}
}

// Result is a finished run.
type Result struct {
	Dir   string
	Cells []CellResult
}

// A unit is one scenario and repetition: one fresh lab in which every tool
// and workload is measured. Units are independent, so they can run in
// parallel labs and an interrupted run resumes at the first unfinished one.
type unit struct {
	index    int
	scenario scenario.Scenario
	rep      int
}

func (u unit) id() string { return fmt.Sprintf("%s-r%d", u.scenario.Name, u.rep) }

const (
	experimentCopy = "experiment.yaml"
	unitsDir       = "units"
	// labTagFile holds the run's lab tag: every unit's lab is named
	// <tag><unit index in base 36>, so concurrent runs never share a lab
	// and a resumed run finds exactly its own leftovers.
	labTagFile = "lab-tag"
)

// Run executes e. On cancellation it tears everything down and returns the
// context's error; finished units stay in the run directory, and
// Options.Resume continues from there.
func Run(ctx context.Context, e *Experiment, opts Options) (*Result, error) {
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		opts.Binary = exe
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	parallel := opts.Parallel
	if parallel == 0 {
		parallel = e.Parallel
	}
	if parallel <= 0 {
		parallel = 1
	}
	if err := checkTools(e, opts.Backend); err != nil {
		return nil, err
	}
	if opts.Backend != nil {
		// Before the run directory exists: a refused run leaves nothing.
		if e.cpuLatency != nil {
			return nil, errors.New("cpu-latency: it holds this host's CPUs, and units on clusters run on their nodes (tune those: README, \"CPU idle states\")")
		}
		if err := checkBackend(e); err != nil {
			return nil, err
		}
		if err := opts.Backend.Check(ctx, BackendPlan{Server: e.Server, Client: e.Client, Scenarios: e.scenarios, Tools: e.Tools, Services: backendServices(e)}); err != nil {
			return nil, err
		}
	}
	if opts.Backend != nil && parallel > 1 && slices.ContainsFunc(e.scenarios, func(s scenario.Scenario) bool { return !s.LAN.IsZero() || !s.WAN.IsZero() }) {
		// Every unit on clusters crosses the same links between them:
		// emulated units side by side would share (and stack) their
		// emulation.
		fmt.Fprintf(opts.Out, "parallel %d: emulated units on clusters share the links between them, so they run one at a time\n", parallel)
		parallel = 1
	}
	// Held before the run directory exists: a host that refuses leaves
	// nothing behind.
	hold, held, err := holdCPULatency(e, opts.Out)
	if err != nil {
		return nil, err
	}
	defer func() { _ = hold.Release() }() // on the early returns below; released after the units otherwise
	dir, err := runDir(e, opts)
	if err != nil {
		return nil, err
	}
	// Tools write configuration files that name other files; absolute
	// paths keep them valid whatever directory a process starts in.
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	tag, err := os.ReadFile(filepath.Join(dir, labTagFile))
	if err != nil {
		return nil, fmt.Errorf("run directory %s: %w", dir, err)
	}
	r := &runner{e: e, opts: opts, dir: dir, tag: strings.TrimSpace(string(tag)), cpuLatency: held, tools: map[string]string{}, seeds: map[string]uint64{}}
	var todo []unit
	for _, sc := range e.scenarios {
		for rep := 1; rep <= e.Repetitions; rep++ {
			u := unit{index: len(r.units), scenario: sc, rep: rep}
			r.units = append(r.units, u)
			if _, err := os.Stat(r.donePath(u)); err != nil {
				todo = append(todo, u)
			}
		}
	}
	// Longest first (unitCost: a unit's time grows with its scenario's
	// round trip and with the cells measured there), so parallel workers
	// do not idle at the end behind one long unit.
	slices.SortStableFunc(todo, func(a, b unit) int {
		return cmp.Compare(e.unitCost(b.scenario), e.unitCost(a.scenario))
	})
	started := time.Now()
	if skipped := len(r.units) - len(todo); skipped > 0 {
		fmt.Fprintf(opts.Out, "resuming %s: %d of %d units already done\n", dir, skipped, len(r.units))
	}
	fmt.Fprintf(opts.Out, "%d units (scenario × repetition), %d at a time; results in %s\n", len(todo), min(parallel, max(len(todo), 1)), dir)
	if e.Rate != nil {
		for _, n := range e.Rate.notes(e.Scenarios) {
			fmt.Fprintln(opts.Out, n)
		}
	}
	runErr := r.runUnits(ctx, todo, parallel)
	if err := hold.Release(); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("cpu-latency: release: %w", err))
	}
	res, err := r.aggregate()
	if err != nil {
		return res, errors.Join(runErr, err)
	}
	if werr := r.writeResults(res, started); werr != nil {
		runErr = errors.Join(runErr, werr)
	}
	return res, runErr
}

// runDir creates a new run directory, or checks that the one to resume
// holds the same experiment.
func runDir(e *Experiment, opts Options) (string, error) {
	if opts.Resume != "" {
		b, err := os.ReadFile(filepath.Join(opts.Resume, experimentCopy))
		if err != nil {
			return "", fmt.Errorf("resume %s: %w", opts.Resume, err)
		}
		if string(b) != string(e.source) {
			return "", fmt.Errorf("resume %s: the run was made with another experiment file (see its %s)", opts.Resume, experimentCopy)
		}
		return opts.Resume, nil
	}
	out := opts.OutDir
	if out == "" {
		out = "results"
	}
	dir := filepath.Join(out, e.Name+"-"+time.Now().UTC().Format("20060102-150405"))
	for _, d := range []string{"raw", unitsDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, labTagFile), []byte(newLabTag()+"\n"), 0o644); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, experimentCopy), e.source, 0o644)
}

type runner struct {
	e     *Experiment
	opts  Options
	dir   string
	tag   string
	units []unit

	cpuLatency string // the CPU latency QoS in force during the units

	mu      sync.Mutex // guards the fields below and the output
	backend string
	ccs     map[string]string
	tools   map[string]string // tool name → version
	seeds   map[string]uint64 // unit → emulator seed
}

func (r *runner) donePath(u unit) string { return filepath.Join(r.dir, unitsDir, u.id()+".done") }

func (r *runner) printf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.opts.Out, format, args...)
}

// runUnits measures units on parallel workers. The first failure stops
// the others; their labs are torn down.
func (r *runner) runUnits(ctx context.Context, todo []unit, parallel int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan unit)
	var wg sync.WaitGroup
	var done int
	// The ETA weighs units by their estimated cost, not their count:
	// units of one experiment may differ several times over.
	var costDone, costLeft time.Duration
	for _, u := range todo {
		costLeft += r.e.unitCost(u.scenario)
	}
	start := time.Now()
	for w := 0; w < min(parallel, len(todo)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				t0 := time.Now()
				if err := r.unit(ctx, u); err != nil {
					cancel(fmt.Errorf("%s: %w", u.id(), err))
					continue
				}
				r.mu.Lock()
				done++
				c := r.e.unitCost(u.scenario)
				costDone, costLeft = costDone+c, costLeft-c
				elapsed := time.Since(start)
				eta := time.Duration(float64(elapsed) / float64(costDone) * float64(costLeft))
				fmt.Fprintf(r.opts.Out, "[%d/%d] %s done in %v; elapsed %v, ETA %v\n", done, len(todo), u.id(),
					time.Since(t0).Round(100*time.Millisecond), elapsed.Round(time.Second), eta.Round(time.Second))
				r.mu.Unlock()
			}
		}()
	}
feed:
	for _, u := range todo {
		select {
		case work <- u:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}

// unit builds a fresh lab, as the seeds revert their testbed to a clean
// state before every run, so no repetition inherits another's state.
func (r *runner) unit(ctx context.Context, u unit) (err error) {
	if r.opts.Backend != nil {
		return r.backendUnit(ctx, u)
	}
	plan, err := r.e.topo.Plan()
	if err != nil {
		return err
	}
	// Each unit has a lab of its own name, so parallel units never share a
	// namespace; addresses may repeat, namespaces keep them apart.
	plan.Rename(r.tag + strconv.FormatInt(int64(u.index), 36))
	u.scenario.Apply(plan)
	lopts := lab.Options{Binary: r.opts.Binary, Emulator: r.opts.Emulator, Logger: r.opts.Logger}
	// A resumed run may find this unit's lab left by the killed one; the
	// tag makes sure it is this run's own.
	_ = lab.Down(context.WithoutCancel(ctx), plan.Name, lopts)
	l, err := lab.Up(ctx, plan, lopts)
	if err != nil {
		return err
	}
	defer func() {
		// The emulator's counters (its drops for loss and for the queue
		// limit) go with the unit's other logs.
		down := lopts
		if path, err := r.unitLog(u, "emulator"); err == nil {
			down.KeepEmulatorLog = path
		}
		if derr := lab.Down(context.WithoutCancel(ctx), plan.Name, down); derr != nil {
			err = errors.Join(err, fmt.Errorf("lab down: %w", derr))
		}
	}()
	r.mu.Lock()
	if l.EmulatorSeed != 0 {
		r.seeds[u.id()] = l.EmulatorSeed
	}
	// Units without impairment (lcl, local) build no emulated links and
	// report "none"; parallel units finish in any order, so a backend that
	// emulates is never overwritten by one that did not.
	if r.backend == "" || r.backend == "none" {
		r.backend = l.Backend
	}
	r.ccs = map[string]string{}
	for _, n := range plan.Nodes {
		r.ccs[n.ID] = n.CongestionControl
	}
	r.mu.Unlock()
	server, _ := plan.Node(r.e.Server)
	client, _ := plan.Node(r.e.Client)
	var services []tool.Service
	for _, name := range r.e.servedWorkloads() {
		port := workloadPorts[name]
		services = append(services, tool.Service{Name: name, Port: port})
		if err := r.startDaemon(ctx, l, u, name, "app", name, "--listen", net.JoinHostPort("0.0.0.0", strconv.Itoa(port))); err != nil {
			return err
		}
	}
	if r.e.Throughput != nil {
		services = append(services, tool.Service{Name: streamService, Port: streamPort})
		if err := r.startDaemon(ctx, l, u, streamService, "load", "stream-server", "--listen", net.JoinHostPort("0.0.0.0", strconv.Itoa(streamPort))); err != nil {
			return err
		}
	}
	if ip := r.e.Iperf3; ip != nil {
		services = append(services, tool.Service{Name: iperfService, Port: iperfPort})
		if err := r.startProcess(ctx, l, u, iperfService, ip.serverArgs()...); err != nil {
			return err
		}
	}
	for _, name := range r.e.Tools {
		t, _ := tool.New(name)
		tdir := filepath.Join(r.dir, "tools", fmt.Sprintf("%s-%s", name, u.id()))
		if err := os.MkdirAll(tdir, 0o755); err != nil {
			return err
		}
		env := tool.Env{Lab: l, Server: server, Client: client, Services: services, Dir: tdir, Binary: r.opts.Binary, Logger: r.opts.Logger}
		if err := r.measureTool(ctx, t, env, u); err != nil {
			return err
		}
		if err := l.CheckEmulator(); err != nil {
			// When it died is unknown: none of the tool's cells in this
			// unit may reach the results as if emulated.
			if derr := r.dropToolFiles(u, name); derr != nil {
				err = errors.Join(err, derr)
			}
			return fmt.Errorf("tool %s: %w", name, err)
		}
	}
	return os.WriteFile(r.donePath(u), nil, 0o644)
}

// newLabTag returns a random four-character tag: with the unit index in
// base 36 it names labs of up to 36^4 units within lab names' 8 characters.
func newLabTag() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// startDaemon starts a server process of the unit on the server node. Its
// output goes to a file, never to a pipe of ours: if the runner dies, a
// write to a pipe without reader would kill the process with SIGPIPE, and
// the lab's cleanup should find it alive. lab.Down stops it.
func (r *runner) startDaemon(ctx context.Context, l *lab.Lab, u unit, name string, args ...string) error {
	return r.startProcess(ctx, l, u, name, append([]string{r.opts.Binary}, args...)...)
}

// unitLog is where unit u's log named name goes (logs/<unit>-<name>.log
// in the run directory), its directory made.
func (r *runner) unitLog(u unit, name string) (string, error) {
	dir := filepath.Join(r.dir, "logs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return filepath.Join(dir, u.id()+"-"+name+".log"), nil
}

// startProcess is startDaemon for any program (argv[0]).
func (r *runner) startProcess(ctx context.Context, l *lab.Lab, u unit, name string, argv ...string) error {
	path, err := r.unitLog(u, name)
	if err != nil {
		return err
	}
	logf, err := os.Create(path)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	cmd, err := l.Command(ctx, r.e.Server, argv...)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait() }() // only reaps
	return nil
}

func (r *runner) measureTool(ctx context.Context, t tool.Tool, env tool.Env, u unit) (err error) {
	defer func() {
		if terr := t.Teardown(context.WithoutCancel(ctx)); terr != nil {
			err = errors.Join(err, fmt.Errorf("tool %s teardown: %w", t.Name(), terr))
		}
	}()
	targets, err := t.Setup(ctx, env)
	if err != nil {
		return fmt.Errorf("tool %s setup: %w", t.Name(), err)
	}
	version := t.Version(ctx)
	r.mu.Lock()
	r.tools[t.Name()] = version
	r.mu.Unlock()
	// Health check: every workload must answer through the tool before
	// anything is measured; apps may still be starting, so retry.
	for _, name := range r.e.servedWorkloads() {
		target, ok := targets[name]
		if !ok {
			return fmt.Errorf("tool %s gave no address for %s", t.Name(), name)
		}
		if err := r.healthCheck(ctx, env, target); err != nil {
			return fmt.Errorf("tool %s: %s not reachable at %s: %w", t.Name(), name, target, err)
		}
	}
	for _, w := range r.e.Workloads {
		target := targets[w.Name]
		for _, size := range w.sizes {
			cell := Cell{Scenario: u.scenario.Name, Tool: t.Name(), Workload: w.label(), Payload: size}
			uw, err := openUsage(t, env.Lab.EmulatorPID)
			if err != nil {
				return err
			}
			samples, err := r.measure(ctx, env, cell, w, target, u.rep)
			if err != nil {
				return err
			}
			if _, err := uw.close(rawPath(r.dir, cell, u.rep), 0, float64(len(samples)+r.e.Load.Warmup)); err != nil {
				return err
			}
			s := report.Summarize(samples)
			r.printf("  %-10s %-9s %-7s %7s  n=%d errors=%d  IQR mean %.3f ms  median %.3f ms  p99 %.3f ms\n",
				u.id(), cell.Tool, cell.Workload, report.FormatSize(cell.Payload), s.Count, s.Errors, s.IQRMeanMS, s.MedianMS, s.P99MS)
		}
	}
	if rt := r.e.Rate; rt != nil {
		for _, c := range rt.cells(u.scenario.Name, t.Name()) {
			uw, err := openUsage(t, env.Lab.EmulatorPID)
			if err != nil {
				return err
			}
			res, err := r.measureRate(ctx, env, c, targets[c.Workload], u.rep)
			if err != nil {
				return fmt.Errorf("tool %s: %s at %v requests/s: %w", t.Name(), c.Workload, c.Rate, err)
			}
			// The window holds the warm-up's requests too, sent at the
			// target rate.
			if _, err := uw.close(ratePath(r.dir, c, u.rep), 0, float64(res.Count+res.Errors)+res.TargetRate*res.WarmupSec); err != nil {
				return err
			}
			below := ""
			if report.BelowRate(res.Answered(), c.Rate) {
				below = "  BELOW RATE: a saturated queue, not the path"
			}
			r.printf("  %-10s %-9s %-7s %7s  rate %v/s over %d conns answered %.1f/s errors=%d  p50 %.3f ms  p99 %.3f ms  max %.3f ms%s\n",
				u.id(), c.Tool, c.Workload, report.FormatSize(c.Payload), c.Rate, c.Connections, res.Answered(), res.Errors,
				float64(res.Latency.P50)/1000, float64(res.Latency.P99)/1000, float64(res.Latency.P100)/1000, below)
		}
	}
	if ip := r.e.Iperf3; ip != nil {
		for _, proto := range ip.protocols() {
			if !t.Carries(tool.Protocol(proto)) {
				r.printf("  %-10s %-9s %-5s not carried\n", u.id(), t.Name(), proto)
				continue
			}
			c := report.IperfCell{Scenario: u.scenario.Name, Tool: t.Name(), Protocol: proto}
			uw, err := openUsage(t, env.Lab.EmulatorPID)
			if err != nil {
				return err
			}
			bytes, line, err := r.measureIperf(ctx, env, c, targets[iperfService], u.rep)
			if err != nil {
				return fmt.Errorf("tool %s: %w", t.Name(), err)
			}
			if _, err := uw.close(iperfPath(r.dir, c, u.rep), bytes, 0); err != nil {
				return err
			}
			r.printf("  %-10s %-9s %s\n", u.id(), t.Name(), line)
		}
	}
	if r.e.Soak != nil {
		sr, err := r.measureSoak(ctx, t, env, targets[soakWorkload], u.scenario.Name, u.rep)
		if err != nil {
			return fmt.Errorf("tool %s: soak: %w", t.Name(), err)
		}
		verdict := "pass"
		if !sr.Pass {
			verdict = "FAIL"
		}
		r.printf("  %-10s %-9s soak %v: %s; requests %d errors %d corrupted %d, rate answered %.1f/s\n",
			u.id(), t.Name(), r.e.Soak.duration, verdict, sr.Requests, sr.Errors, sr.Corrupted, sr.AnsweredRate)
	}
	if tp := r.e.Throughput; tp != nil {
		for _, c := range tp.cells(u.scenario.Name, t.Name()) {
			for run := 1; run <= tp.Runs; run++ {
				uw, err := openUsage(t, env.Lab.EmulatorPID)
				if err != nil {
					return err
				}
				path := throughputPath(r.dir, c, u.rep, run)
				res, err := r.measureThroughput(ctx, env, targets[streamService], c, path)
				if err != nil {
					return fmt.Errorf("tool %s: stream %+v: %w", t.Name(), c, err)
				}
				// A bulk cell is normalized by bytes, an rr cell by
				// transactions.
				bytes, requests := float64(res.Bytes), 0.0
				if c.RR > 0 {
					bytes, requests = 0, float64(res.Transactions)
				}
				if _, err := uw.close(path, bytes, requests); err != nil {
					return err
				}
				r.printThroughput(u, t.Name(), c, res)
			}
		}
	}
	return nil
}

func (r *runner) healthCheck(ctx context.Context, env tool.Env, target string) error {
	var last error
	for i := 0; i < 50; i++ {
		args := []string{r.opts.Binary, "load", "seq", "--url", "http://" + target + "/", "--requests", "1",
			"--connect-timeout", "1s", "--response-timeout", "5s", "--csv", "-", "--quiet"}
		cmd, err := env.Lab.Command(ctx, env.Client.ID, args...)
		if err != nil {
			return err
		}
		out, err := cmd.Output()
		if err == nil {
			var samples []load.Sample
			if samples, err = load.ReadCSV(strings.NewReader(string(out))); err == nil {
				if len(samples) == 1 && samples[0].OK() {
					return nil
				}
				err = fmt.Errorf("request failed: %v", samples)
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return last
}

// dropToolFiles removes the raw files tool measured in unit u (every kind:
// request CSVs, rate, stream and iperf3 results, named scenario-tool-…-rN),
// but not those of a tool whose name extends this one's (strait-packet for
// strait).
func (r *runner) dropToolFiles(u unit, tool string) error {
	prefix := u.scenario.Name + "-" + tool + "-"
	paths, err := filepath.Glob(filepath.Join(r.dir, "raw", prefix+"*"))
	if err != nil {
		return err
	}
	rep := fmt.Sprintf("-r%d.", u.rep)
	var errs []error
	for _, p := range paths {
		name := filepath.Base(p)
		if !strings.Contains(name, rep) || slices.ContainsFunc(r.e.Tools, func(other string) bool {
			return len(other) > len(tool) && strings.HasPrefix(name, u.scenario.Name+"-"+other+"-")
		}) {
			continue
		}
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func rawPath(dir string, cell Cell, rep int) string {
	return filepath.Join(dir, "raw", fmt.Sprintf("%s-%s-%s-%s-r%d.csv", cell.Scenario, cell.Tool, cell.Workload, report.FormatSize(cell.Payload), rep))
}

// measure runs the load generator on the client node for one cell and
// repetition; its CSV stays in raw/ and is what every later step reads.
func (r *runner) measure(ctx context.Context, env tool.Env, cell Cell, w Workload, target string, rep int) ([]load.Sample, error) {
	raw := rawPath(r.dir, cell, rep)
	args := append([]string{r.opts.Binary, "load"}, r.seqArgs(cell, w, target, raw+".tmp")...)
	cmd, err := env.Lab.Command(ctx, env.Client.ID, args...)
	if err != nil {
		return nil, err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("load seq on %s: %w: %s", env.Client.ID, err, strings.TrimSpace(string(out)))
	}
	samples, err := readSamples(raw + ".tmp")
	if err != nil {
		return nil, err
	}
	// Renamed only when complete, so a resumed run never reads half a file.
	return samples, os.Rename(raw+".tmp", raw)
}

func readSamples(path string) ([]load.Sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	samples, err := load.ReadCSV(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return samples, nil
}

// cells lists every cell of the experiment in report order: scenario, tool,
// workload, payload.
func (r *runner) cells() []Cell {
	var cells []Cell
	for _, sc := range r.e.scenarios {
		for _, t := range r.e.Tools {
			for _, w := range r.e.Workloads {
				for _, size := range w.sizes {
					cells = append(cells, Cell{Scenario: sc.Name, Tool: t, Workload: w.label(), Payload: size})
				}
			}
		}
	}
	return cells
}

// aggregate reads every finished unit's raw files, writes requests.csv (and
// the JTL file when asked for) and summarizes each cell.
func (r *runner) aggregate() (*Result, error) {
	res := &Result{Dir: r.dir}
	csvf, err := os.Create(filepath.Join(r.dir, "requests.csv"))
	if err != nil {
		return res, err
	}
	defer csvf.Close()
	out := newRequestsWriter(csvf)
	var jtl *jtlWriter
	if r.e.JTL {
		f, err := os.Create(filepath.Join(r.dir, "requests.jtl"))
		if err != nil {
			return res, err
		}
		defer f.Close()
		jtl = newJTLWriter(f)
	}
	var times [][]float64
	for _, cell := range r.cells() {
		var all []load.Sample
		var paths []string
		for rep := 1; rep <= r.e.Repetitions; rep++ {
			samples, err := readSamples(rawPath(r.dir, cell, rep))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			paths = append(paths, rawPath(r.dir, cell, rep))
			if err != nil {
				return res, err
			}
			if err := out.write(cell, rep, samples); err != nil {
				return res, err
			}
			if jtl != nil {
				if err := jtl.write(cell, samples); err != nil {
					return res, err
				}
			}
			all = append(all, samples...)
		}
		if len(all) > 0 {
			us, err := readUsage(paths)
			if err != nil {
				return res, err
			}
			res.Cells = append(res.Cells, CellResult{Cell: cell, Summary: report.Summarize(all), Usage: us})
			times = append(times, report.Times(all))
		}
	}
	addIntervals(res.Cells, times)
	if jtl != nil {
		if err := jtl.flush(); err != nil {
			return res, err
		}
	}
	return res, out.flush()
}

// Metadata describes the run well enough to repeat it and to tell runs on
// different machines apart.
type Metadata struct {
	Experiment string            `json:"experiment"`
	Started    time.Time         `json:"started"`
	Finished   time.Time         `json:"finished"`
	Host       map[string]string `json:"host"`
	Strait     string            `json:"straitVersion"`
	Emulation  string            `json:"emulationBackend"`
	TCPCC      map[string]string `json:"tcpCongestionControl"`
	Tools      map[string]string `json:"tools"`
	Scenarios  any               `json:"scenarios"`
	Units      int               `json:"units"`
	// EmulatorSeeds are the userspace emulator's random seeds, per unit
	// measured in this invocation.
	EmulatorSeeds map[string]uint64 `json:"emulatorSeeds,omitempty"`
	// The experiment file as given (also in experiment.yaml), the topology
	// it resolved to, and the load settings with defaults applied.
	ExperimentFile string      `json:"experimentFile"`
	Topology       any         `json:"topology"`
	Load           Load        `json:"load"`
	Rate           *Rate       `json:"rate,omitempty"`
	Throughput     *Throughput `json:"throughput,omitempty"`
	Repetitions    int         `json:"repetitions"`
	// KPIs are the workloads' response-time limits in ms, as the report
	// flags them; a workload without KPI is absent.
	KPIs map[string]float64 `json:"kpis"`
	// Build is how the running strait was built: Go's record of the
	// module version, VCS commit and whether the tree was modified.
	Build map[string]string `json:"build,omitempty"`
	// Iperf3 are the iperf3 and ping settings with defaults applied;
	// Reference another testbed's published figures to show beside ours.
	Iperf3    *Iperf3    `json:"iperf3,omitempty"`
	Reference *Reference `json:"reference,omitempty"`
	// Soak are the soak settings with defaults applied.
	Soak *Soak `json:"soak,omitempty"`
	// ToolUsage is each tool's CPU time and peak RSS over every cell of
	// the run (report.UsageSummary: "kernel" tools have no process).
	ToolUsage map[string]*report.UsageSummary `json:"toolUsage,omitempty"`
	// Clusters describes the clusters a Backend ran the units on (lab/kube:
	// versions, node kernels, CNI, the path direct took); absent for the
	// namespace lab.
	Clusters any `json:"clusters,omitempty"`
}

// toolUsage totals every cell's usage per tool.
func toolUsage(cells []CellResult, rate []report.RateSummary, tput []report.ThroughputSummary, iperfs []report.IperfSummary) map[string]*report.UsageSummary {
	m := map[string]*report.UsageSummary{}
	add := func(t string, u *report.UsageSummary) {
		if u != nil {
			m[t] = report.MergeUsage(m[t], u)
		}
	}
	for _, c := range cells {
		add(c.Tool, c.Usage)
	}
	for _, c := range rate {
		add(c.Tool, c.Usage)
	}
	for _, c := range tput {
		add(c.Tool, c.Usage)
	}
	for _, c := range iperfs {
		add(c.Tool, c.Usage)
	}
	return m
}

// buildInfo reads the VCS commit and module version the Go toolchain
// recorded in this binary, so a run names its code even when the version
// string was not set at link time.
func buildInfo() map[string]string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	info := map[string]string{"go": bi.GoVersion, "module": bi.Main.Path + "@" + bi.Main.Version}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision", "vcs.time", "vcs.modified", "GOARCH", "GOOS", "CGO_ENABLED":
			info[s.Key] = s.Value
		}
	}
	return info
}

func (r *runner) writeResults(res *Result, started time.Time) error {
	var scen []map[string]string
	for _, sc := range r.e.scenarios {
		lan, wan := sc.LAN.String(), sc.WAN.String()
		if sc.AsDeclared {
			lan, wan = "as the topology declares", "as the topology declares"
		}
		m := map[string]string{"name": sc.Name, "lan": lan, "wan": wan}
		if sc.MTU != 0 {
			m["mtu"] = strconv.Itoa(sc.MTU)
		}
		if sc.ComposedFrom != "" {
			m["composedFrom"] = sc.ComposedFrom
		}
		scen = append(scen, m)
	}
	rate, err := r.aggregateRate()
	if err != nil {
		return err
	}
	tput, err := r.aggregateThroughput()
	if err != nil {
		return err
	}
	iperfs, err := r.aggregateIperf()
	if err != nil {
		return err
	}
	soaks, err := r.aggregateSoak()
	if err != nil {
		return err
	}
	r.mu.Lock()
	md := Metadata{
		Experiment: r.e.Name, Started: started.UTC(), Finished: time.Now().UTC(),
		Host: hostInfo(), Strait: r.opts.Version, Emulation: r.backend, TCPCC: r.ccs,
		Tools: r.tools, Scenarios: scen, Units: len(r.units), EmulatorSeeds: r.seeds,
		ExperimentFile: string(r.e.source), Topology: r.e.topo, Load: r.e.Load,
		Rate: r.e.Rate, Throughput: r.e.Throughput, Repetitions: r.e.Repetitions,
		KPIs: r.e.kpis(), Build: buildInfo(), Iperf3: r.e.Iperf3, Reference: r.e.Reference,
		ToolUsage: toolUsage(res.Cells, rate, tput, iperfs),
	}
	if r.opts.Backend != nil {
		md.Clusters = r.opts.Backend.Metadata()
	} else {
		md.Host["cpu latency QoS"] = r.cpuLatency
	}
	r.mu.Unlock()
	if err := writeJSON(filepath.Join(r.dir, "metadata.json"), md); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(r.dir, "summary.json"), res.Cells); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(r.dir, "table.txt"))
	if err != nil {
		return err
	}
	defer f.Close()
	table := io.MultiWriter(f, r.opts.Out)
	if len(res.Cells) > 0 {
		if err := WriteTable(table, res.Cells, r.e.kpis()); err != nil {
			return err
		}
	}
	if rate != nil {
		if err := writeJSON(filepath.Join(r.dir, html.RateFile), rate); err != nil {
			return err
		}
		if err := report.WriteRateTable(table, rate); err != nil {
			return err
		}
	}
	if tput != nil {
		if err := writeJSON(filepath.Join(r.dir, html.ThroughputFile), tput); err != nil {
			return err
		}
		if err := report.WriteThroughputTable(table, tput); err != nil {
			return err
		}
	}
	if iperfs != nil {
		if err := writeJSON(filepath.Join(r.dir, html.IperfFile), iperfs); err != nil {
			return err
		}
		if err := report.WriteIperfTable(table, iperfs); err != nil {
			return err
		}
	}
	if soaks != nil {
		if err := writeJSON(filepath.Join(r.dir, html.SoakFile), soaks); err != nil {
			return err
		}
		writeSoakTable(table, soaks)
	}
	if err := WriteVerdicts(table, res.Cells, rate, tput); err != nil {
		return err
	}
	// A table.txt that did not reach the disk is an error, not a
	// deferred close's silence.
	if err := f.Close(); err != nil {
		return err
	}
	if len(res.Cells) > 0 || len(rate) > 0 || len(tput) > 0 || len(iperfs) > 0 || len(soaks) > 0 {
		if err := writeReport(r.dir); err != nil {
			return fmt.Errorf("html report: %w", err)
		}
	}
	extra := extraFiles(rate, tput)
	if iperfs != nil {
		extra += ", " + html.IperfFile
	}
	if soaks != nil {
		extra += ", " + html.SoakFile + ", soak/"
	}
	r.printf("\nresults: %s (report.html, table.txt, metadata.json, summary.json, requests.csv%s)\n", r.dir, extra)
	return nil
}

func extraFiles(rate []report.RateSummary, tput []report.ThroughputSummary) string {
	s := ""
	if rate != nil {
		s += ", " + html.RateFile
	}
	if tput != nil {
		s += ", " + html.ThroughputFile
	}
	return s
}

// writeReport renders the run directory's report.html, the same file
// `strait report DIR` writes.
func writeReport(dir string) error {
	run, err := html.LoadRun(dir)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return err
	}
	if err := html.Write(f, run); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// seqArgs are `strait load`'s arguments for one cell, writing its CSV to
// csv ("-": standard output); the namespace lab and a Backend run the same.
func (r *runner) seqArgs(cell Cell, w Workload, target, csv string) []string {
	l := r.e.Load
	args := []string{"seq",
		"--url", "http://" + target + "/",
		"--requests", strconv.Itoa(w.requestsFor(cell.Payload, l)),
		"--threads", strconv.Itoa(l.Threads),
		"--keepalive=" + strconv.FormatBool(w.keepAlive(l)),
		"--payload", strconv.Itoa(cell.Payload),
		"--warmup", strconv.Itoa(l.Warmup),
		"--csv", csv,
		"--quiet",
	}
	if l.Think != "" {
		args = append(args, "--think", l.Think)
	}
	if l.Duration != "" {
		d, _ := emulation.ParseDuration(l.Duration) // checked by Load.validate
		args = append(args, "--duration", d.String())
	}
	if l.ConnectTimeout != "" {
		args = append(args, "--connect-timeout", l.ConnectTimeout)
	}
	if l.ResponseTimeout != "" {
		args = append(args, "--response-timeout", l.ResponseTimeout)
	}
	if w.Name == "echo" {
		args = append(args, "--verify-echo")
	}
	return args
}

// checkTools refuses the installed tool outside a Backend: the namespace
// lab has no interconnect installed to measure.
func checkTools(e *Experiment, b Backend) error {
	if b == nil && slices.Contains(e.Tools, InstalledTool) {
		return fmt.Errorf("tool %q measures what is installed on clusters: it needs a run on clusters (strait lab run --clusters FILE)", InstalledTool)
	}
	return nil
}

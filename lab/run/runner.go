package run

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/scenario"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/lab/topology"
	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

// Options are the runner's knobs; the zero value writes under ./results.
type Options struct {
	Binary   string       // strait binary run in the namespaces; empty: this executable
	OutDir   string       // parent of the run directory; empty: "results"
	Emulator string       // emulation backend override
	Version  string       // strait version for the metadata
	Out      io.Writer    // progress and the final table; nil: discard
	Logger   *slog.Logger // nil: discard
}

// Cell identifies one measured combination.
type Cell struct {
	Scenario string `json:"scenario"`
	Tool     string `json:"tool"`
	Workload string `json:"workload"`
	Payload  int    `json:"payload"`
}

// CellResult is the summary of a cell over all its repetitions.
type CellResult struct {
	Cell
	report.Summary
}

// Result is a finished run.
type Result struct {
	Dir   string
	Cells []CellResult
}

// Run executes e. On cancellation it tears everything down and returns the
// context's error; what was measured until then stays in the run directory.
func Run(ctx context.Context, e *Experiment, opts Options) (*Result, error) {
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		opts.Binary = exe
	}
	if opts.OutDir == "" {
		opts.OutDir = "results"
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	dir := filepath.Join(opts.OutDir, e.Name+"-"+time.Now().UTC().Format("20060102-150405"))
	if err := os.MkdirAll(filepath.Join(dir, "raw"), 0o755); err != nil {
		return nil, err
	}
	r := &runner{e: e, opts: opts, dir: dir, samples: map[Cell][]load.Sample{}}
	started := time.Now()
	err := r.run(ctx)
	res := &Result{Dir: dir}
	for _, c := range r.order {
		res.Cells = append(res.Cells, CellResult{Cell: c, Summary: report.Summarize(r.samples[c])})
	}
	if werr := r.writeResults(res, started); werr != nil {
		err = errors.Join(err, werr)
	}
	return res, err
}

type runner struct {
	e       *Experiment
	opts    Options
	dir     string
	csv     *os.File
	header  bool
	samples map[Cell][]load.Sample
	order   []Cell
	backend string
	ccs     map[string]string
	tools   map[string]string // tool name → version
}

func (r *runner) run(ctx context.Context) error {
	f, err := os.Create(filepath.Join(r.dir, "requests.csv"))
	if err != nil {
		return err
	}
	defer f.Close()
	r.csv = f
	r.tools = map[string]string{}
	total := len(r.e.scenarios) * r.e.Repetitions
	done := 0
	for _, sc := range r.e.scenarios {
		for rep := 1; rep <= r.e.Repetitions; rep++ {
			fmt.Fprintf(r.opts.Out, "[%d/%d] scenario %s (LAN %s; WAN %s), repetition %d\n",
				done+1, total, sc.Name, sc.LAN, sc.WAN, rep)
			if err := r.repetition(ctx, sc, rep); err != nil {
				return fmt.Errorf("scenario %s repetition %d: %w", sc.Name, rep, err)
			}
			done++
		}
	}
	return nil
}

// repetition builds a fresh lab, as the seeds revert their testbed to a
// clean state before every run, so no repetition inherits another's state.
func (r *runner) repetition(ctx context.Context, sc scenario.Scenario, rep int) (err error) {
	plan, err := r.e.topo.Plan()
	if err != nil {
		return err
	}
	sc.Apply(plan)
	lopts := lab.Options{Binary: r.opts.Binary, Emulator: r.opts.Emulator, Logger: r.opts.Logger}
	l, err := lab.Up(ctx, plan, lopts)
	if err != nil {
		return err
	}
	defer func() {
		if derr := lab.Down(context.WithoutCancel(ctx), plan.Name, lopts); derr != nil {
			err = errors.Join(err, fmt.Errorf("lab down: %w", derr))
		}
	}()
	r.backend = l.Backend
	r.ccs = map[string]string{}
	for _, n := range plan.Nodes {
		r.ccs[n.ID] = n.CongestionControl
	}
	server, _ := plan.Node(r.e.Server)
	client, _ := plan.Node(r.e.Client)
	var services []tool.Service
	for _, w := range r.e.Workloads {
		port := workloadPorts[w.Name]
		services = append(services, tool.Service{Name: w.Name, Port: port})
		cmd, err := l.Command(ctx, r.e.Server, r.opts.Binary, "app", w.Name, "--listen", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s app: %w", w.Name, err)
		}
		// lab.Down kills every process in the lab's namespaces; Wait here
		// only reaps.
		go func() { _ = cmd.Wait() }()
	}
	for _, name := range r.e.Tools {
		t, _ := tool.New(name)
		tdir := filepath.Join(r.dir, "tools", fmt.Sprintf("%s-%s-r%d", name, sc.Name, rep))
		if err := os.MkdirAll(tdir, 0o755); err != nil {
			return err
		}
		env := tool.Env{Lab: l, Server: server, Client: client, Services: services, Dir: tdir, Binary: r.opts.Binary, Logger: r.opts.Logger}
		if err := r.measureTool(ctx, t, env, sc, rep); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) measureTool(ctx context.Context, t tool.Tool, env tool.Env, sc scenario.Scenario, rep int) (err error) {
	defer func() {
		if terr := t.Teardown(context.WithoutCancel(ctx)); terr != nil {
			err = errors.Join(err, fmt.Errorf("tool %s teardown: %w", t.Name(), terr))
		}
	}()
	targets, err := t.Setup(ctx, env)
	if err != nil {
		return fmt.Errorf("tool %s setup: %w", t.Name(), err)
	}
	r.tools[t.Name()] = t.Version(ctx)
	for _, w := range r.e.Workloads {
		target, ok := targets[w.Name]
		if !ok {
			return fmt.Errorf("tool %s gave no address for %s", t.Name(), w.Name)
		}
		// Health check: the workload must answer through the tool before
		// anything is measured; apps may still be starting, so retry.
		if err := r.healthCheck(ctx, env, w.Name, target); err != nil {
			return fmt.Errorf("tool %s: %s not reachable at %s: %w", t.Name(), w.Name, target, err)
		}
		for _, size := range w.sizes {
			cell := Cell{Scenario: sc.Name, Tool: t.Name(), Workload: w.Name, Payload: size}
			samples, err := r.measure(ctx, env, cell, target, rep)
			if err != nil {
				return err
			}
			if _, seen := r.samples[cell]; !seen {
				r.order = append(r.order, cell)
			}
			r.samples[cell] = append(r.samples[cell], samples...)
			s := report.Summarize(samples)
			fmt.Fprintf(r.opts.Out, "  %-8s %-7s %7s  n=%d errors=%d  IQR mean %.3f ms  median %.3f ms  p99 %.3f ms\n",
				cell.Tool, cell.Workload, FormatSize(cell.Payload), s.Count, s.Errors, s.IQRMeanMS, s.MedianMS, s.P99MS)
		}
	}
	return nil
}

func (r *runner) healthCheck(ctx context.Context, env tool.Env, workload, target string) error {
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

// measure runs the load generator on the client node for one cell and
// appends its rows, prefixed with the cell, to requests.csv.
func (r *runner) measure(ctx context.Context, env tool.Env, cell Cell, target string, rep int) ([]load.Sample, error) {
	raw := filepath.Join(r.dir, "raw", fmt.Sprintf("%s-%s-%s-%s-r%d.csv", cell.Scenario, cell.Tool, cell.Workload, FormatSize(cell.Payload), rep))
	l := r.e.Load
	args := []string{r.opts.Binary, "load", "seq",
		"--url", "http://" + target + "/",
		"--requests", strconv.Itoa(l.Requests),
		"--threads", strconv.Itoa(l.Threads),
		"--keepalive=" + strconv.FormatBool(l.keepAlive()),
		"--payload", strconv.Itoa(cell.Payload),
		"--warmup", strconv.Itoa(l.Warmup),
		"--csv", raw,
	}
	if l.Think != "" {
		args = append(args, "--think", l.Think)
	}
	if l.ConnectTimeout != "" {
		args = append(args, "--connect-timeout", l.ConnectTimeout)
	}
	if l.ResponseTimeout != "" {
		args = append(args, "--response-timeout", l.ResponseTimeout)
	}
	if cell.Workload == "echo" {
		args = append(args, "--verify-echo")
	}
	cmd, err := env.Lab.Command(ctx, env.Client.ID, args...)
	if err != nil {
		return nil, err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("load seq on %s: %w: %s", env.Client.ID, err, strings.TrimSpace(string(out)))
	}
	f, err := os.Open(raw)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	samples, err := load.ReadCSV(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", raw, err)
	}
	if err := r.appendCSV(raw, cell, rep); err != nil {
		return nil, err
	}
	return samples, nil
}

// appendCSV copies a raw load CSV into requests.csv with the cell's columns
// in front, so one file holds every request of the run.
func (r *runner) appendCSV(raw string, cell Cell, rep int) error {
	f, err := os.Open(raw)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	w := bufio.NewWriter(r.csv)
	prefix := fmt.Sprintf("%s,%s,%s,%d,%d,", cell.Scenario, cell.Tool, cell.Workload, cell.Payload, rep)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if first {
			first = false
			if !r.header {
				fmt.Fprintf(w, "scenario,tool,workload,payload_bytes,repetition,%s\n", line)
				r.header = true
			}
			continue
		}
		fmt.Fprintf(w, "%s%s\n", prefix, line)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return w.Flush()
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
	// Experiment file as given, and the topology it resolved to.
	ExperimentFile string             `json:"experimentFile"`
	Topology       *topology.Topology `json:"topology"`
	Load           Load               `json:"load"`
}

func (r *runner) writeResults(res *Result, started time.Time) error {
	var scen []map[string]string
	for _, sc := range r.e.scenarios {
		scen = append(scen, map[string]string{"name": sc.Name, "lan": sc.LAN.String(), "wan": sc.WAN.String()})
	}
	md := Metadata{
		Experiment: r.e.Name, Started: started.UTC(), Finished: time.Now().UTC(),
		Host: hostInfo(), Strait: r.opts.Version, Emulation: r.backend, TCPCC: r.ccs,
		Tools: r.tools, Scenarios: scen,
		ExperimentFile: string(r.e.source), Topology: r.e.topo, Load: r.e.Load,
	}
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
	WriteTable(io.MultiWriter(f, r.opts.Out), res.Cells)
	fmt.Fprintf(r.opts.Out, "\nresults: %s (requests.csv, summary.json, metadata.json, table.txt)\n", r.dir)
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func hostInfo() map[string]string {
	info := map[string]string{}
	if out, err := exec.Command("uname", "-srm").Output(); err == nil {
		info["kernel"] = strings.TrimSpace(string(out))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				info["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	info["cpus"] = strconv.Itoa(numCPU())
	info["go"] = goVersion()
	return info
}

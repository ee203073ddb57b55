package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/strait-net/strait/lab/scenario"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

// InstalledTool is the tool that measures a multi-cluster interconnect the
// user installed (Submariner, Skupper, …) through the name it gives a
// service. Only a Backend can run it: the namespace lab has nothing
// installed.
const InstalledTool = "installed"

// Backend runs an experiment's units somewhere other than network
// namespaces of this host: lab/kube runs them on Kubernetes clusters. The
// runner keeps everything else (units, resume, progress, the load
// generator's arguments, aggregation, the report), so a cell means the same
// on both.
type Backend interface {
	// Check runs before the run directory exists and before anything is
	// measured: it refuses what the backend cannot do (an emulated
	// scenario without link emulation, an unknown tool, an unreachable
	// cluster) with an error naming the problem.
	Check(ctx context.Context, p BackendPlan) error
	// Unit starts a unit's workloads. The unit is closed at the unit's end
	// whatever happened; a unit of the same ID left by an interrupted run
	// must be removed by Unit first (resume).
	Unit(ctx context.Context, u BackendUnitSpec) (BackendUnit, error)
	// Metadata is what metadata.json records under "clusters".
	Metadata() any
}

// BackendPlan is what Check is given.
type BackendPlan struct {
	Server, Client string // the experiment's cluster/node ids
	Scenarios      []scenario.Scenario
	Tools          []string
	Services       []BackendService
}

// BackendUnitSpec is one unit: ID is unique within the run and stable
// across resumes (a DNS label: the run's tag and the unit's index).
type BackendUnitSpec struct {
	ID       string
	Scenario scenario.Scenario
	Services []BackendService
	// EmulatorLog is the file the unit's link emulation's log goes to
	// when the unit closes, as the namespace lab keeps its emulator's
	// (logs/<unit>-emulator.log); "": nowhere. A unit that emulated
	// nothing writes none.
	EmulatorLog string
}

// BackendService is a server a unit runs where the workloads run, as the
// namespace lab runs it on the server node: a workload's app, or the
// throughput measurement's stream server.
type BackendService struct {
	tool.Service
	// Args are strait's arguments that start it, without the
	// `--listen HOST:PORT` the backend adds: ["app", "echo"],
	// ["load", "stream-server"].
	Args []string
	// Stream marks the stream server: it speaks package load's stream
	// handshake, not HTTP, and logs a failed test for every connection
	// that sends none (a TCP readiness probe's, say).
	Stream bool
}

// BackendUnit is one unit's workloads, ready to be measured.
type BackendUnit interface {
	// Tool makes every service reachable through tool name and returns,
	// per service name, the host:port the load generator dials, and the
	// tool's version.
	Tool(ctx context.Context, name string) (map[string]string, string, error)
	// Load runs `strait load ARGS...` where the load generator runs and
	// returns its standard output; an error carries its standard error.
	Load(ctx context.Context, args []string) ([]byte, error)
	// Close removes the unit's workloads and tools.
	Close(ctx context.Context) error
}

// checkBackend refuses the parts of an experiment a backend cannot run:
// the runner measures them with processes on this host (usage, iperf3,
// soak's sampling) or has not been taught to run them remotely yet.
// Throughput runs: its client is `strait load stream`, run where the load
// generator runs like `strait load seq`.
func checkBackend(e *Experiment) error {
	var parts []string
	if e.Rate != nil {
		parts = append(parts, "rate")
	}
	if e.Iperf3 != nil {
		parts = append(parts, "iperf3")
	}
	if e.Soak != nil {
		parts = append(parts, "soak")
	}
	if len(parts) > 0 {
		return fmt.Errorf("runs on clusters measure workloads and throughput only; the experiment also has %s (run it in the namespace lab)", strings.Join(parts, ", "))
	}
	return nil
}

// backendServices are the servers a unit runs, on the namespace lab's
// ports: the workloads' apps, and the stream server where the experiment
// measures throughput (as the namespace lab starts it: in every unit).
func backendServices(e *Experiment) []BackendService {
	var services []BackendService
	for _, name := range e.servedWorkloads() {
		services = append(services, BackendService{Service: tool.Service{Name: name, Port: workloadPorts[name]}, Args: []string{"app", name}})
	}
	if e.Throughput != nil {
		services = append(services, BackendService{Service: tool.Service{Name: streamService, Port: streamPort}, Args: []string{"load", "stream-server"}, Stream: true})
	}
	return services
}

// backendUnit is unit for a Backend: the same services, tools, health
// check and cells as in a lab, the load generator run by the backend.
func (r *runner) backendUnit(ctx context.Context, u unit) (err error) {
	emulatorLog, err := r.unitLog(u, "emulator")
	if err != nil {
		return err
	}
	bu, err := r.opts.Backend.Unit(ctx, BackendUnitSpec{ID: r.tag + strconv.FormatInt(int64(u.index), 36), Scenario: u.scenario,
		Services: backendServices(r.e), EmulatorLog: emulatorLog})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := bu.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("unit cleanup: %w", cerr))
		}
	}()
	for _, name := range r.e.Tools {
		targets, version, err := bu.Tool(ctx, name)
		if err != nil {
			return fmt.Errorf("tool %s setup: %w", name, err)
		}
		r.mu.Lock()
		r.tools[name] = version
		r.mu.Unlock()
		for _, w := range r.e.servedWorkloads() {
			target, ok := targets[w]
			if !ok {
				return fmt.Errorf("tool %s gave no address for %s", name, w)
			}
			if err := r.backendHealth(ctx, bu, target); err != nil {
				return fmt.Errorf("tool %s: %s not reachable at %s: %w", name, w, target, err)
			}
		}
		for _, w := range r.e.Workloads {
			for _, size := range w.sizes {
				cell := Cell{Scenario: u.scenario.Name, Tool: name, Workload: w.label(), Payload: size}
				raw := rawPath(r.dir, cell, u.rep)
				args := r.seqArgs(cell, w, targets[w.Name], "-")
				out, err := bu.Load(ctx, args)
				if err != nil {
					return fmt.Errorf("tool %s: load seq: %w", name, err)
				}
				samples, err := load.ReadCSV(strings.NewReader(string(out)))
				if err != nil {
					return fmt.Errorf("tool %s: load seq output: %w", name, err)
				}
				// Renamed only when complete, so a resumed run never
				// reads half a file.
				if err := os.WriteFile(raw+".tmp", out, 0o644); err != nil {
					return err
				}
				if err := os.Rename(raw+".tmp", raw); err != nil {
					return err
				}
				s := report.Summarize(samples)
				r.printf("  %-10s %-9s %-7s %7s  n=%d errors=%d  IQR mean %.3f ms  median %.3f ms  p99 %.3f ms\n",
					u.id(), cell.Tool, cell.Workload, report.FormatSize(cell.Payload), s.Count, s.Errors, s.IQRMeanMS, s.MedianMS, s.P99MS)
			}
		}
		if err := r.backendThroughput(ctx, bu, name, targets, u); err != nil {
			return err
		}
	}
	return os.WriteFile(r.donePath(u), nil, 0o644)
}

// backendThroughput is measureTool's throughput part through the backend's
// load generator: `strait load stream` with the namespace lab's arguments,
// its JSON result from the standard output into raw/ (the file the
// namespace lab's --json writes), the same summary line. The backend
// measures no processes' CPU, so the cells have no usage ("not measured"
// in the report).
func (r *runner) backendThroughput(ctx context.Context, bu BackendUnit, toolName string, targets map[string]string, u unit) error {
	tp := r.e.Throughput
	if tp == nil {
		return nil
	}
	cells := tp.cells(u.scenario.Name, toolName)
	if len(cells) == 0 {
		return nil
	}
	target, ok := targets[streamService]
	if !ok {
		return fmt.Errorf("tool %s gave no address for %s", toolName, streamService)
	}
	// The namespace lab retries a refused connection while its stream
	// server starts; here the server may also still be on its way
	// through the tool (an export being imported), so it must answer a
	// short request/response test first, as the workloads answer their
	// health check.
	if err := r.backendStreamHealth(ctx, bu, target); err != nil {
		return fmt.Errorf("tool %s: %s not reachable at %s: %w", toolName, streamService, target, err)
	}
	for _, c := range cells {
		for run := 1; run <= tp.Runs; run++ {
			out, err := bu.Load(ctx, append(r.streamArgs(c, target), "--json", "-"))
			if err != nil {
				return fmt.Errorf("tool %s: stream %+v: %w", toolName, c, err)
			}
			res, raw, err := decodeStreamOutput(out)
			if err != nil {
				return fmt.Errorf("tool %s: stream %+v: load stream output: %w", toolName, c, err)
			}
			path := throughputPath(r.dir, c, u.rep, run)
			// Renamed only when complete, so a resumed run never reads half a file.
			if err := os.WriteFile(path+".tmp", raw, 0o644); err != nil {
				return err
			}
			if err := os.Rename(path+".tmp", path); err != nil {
				return err
			}
			r.printThroughput(u, toolName, c, res)
		}
	}
	return nil
}

// backendStreamHealth is backendHealth for the stream server.
func (r *runner) backendStreamHealth(ctx context.Context, bu BackendUnit, target string) error {
	return retryHealth(ctx, func() error {
		_, err := bu.Load(ctx, []string{"stream", "--server", target, "--rr", "64", "--duration", "50ms", "--connect-timeout", "2s"})
		return err
	})
}

// retryHealth tries check up to 50 times, 200 ms apart, until it passes:
// a backend's workloads may take seconds to become reachable through a
// tool. It returns the last failure, or the context's error.
func retryHealth(ctx context.Context, check func() error) error {
	var last error
	for i := 0; i < 50; i++ {
		if last = check(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return last
}

// decodeStreamOutput takes the JSON result from what `strait load stream
// --json -` printed: its table, then the result (an indented object, so
// the first line that starts with '{' starts it). raw is the JSON as
// --json FILE writes it.
func decodeStreamOutput(out []byte) (res *load.StreamResult, raw []byte, err error) {
	start := 0
	if !bytes.HasPrefix(out, []byte("{")) {
		i := bytes.Index(out, []byte("\n{"))
		if i < 0 {
			return nil, nil, fmt.Errorf("no JSON result in %q", abbreviate(out))
		}
		start = i + 1
	}
	raw = out[start:]
	dec := json.NewDecoder(bytes.NewReader(raw))
	res = &load.StreamResult{}
	if err := dec.Decode(res); err != nil {
		return nil, nil, fmt.Errorf("JSON result: %w", err)
	}
	// Only JSON's whitespace may follow (RFC 8259): raw must decode alone.
	if rest := bytes.Trim(raw[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, nil, fmt.Errorf("JSON result: %q follows it", abbreviate(rest))
	}
	if res.Mode != "stream" && res.Mode != "rr" {
		return nil, nil, fmt.Errorf("JSON result: mode %q, want stream or rr", res.Mode)
	}
	return res, raw, nil
}

// abbreviate keeps an error message about a tool's output short.
func abbreviate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// backendHealth is healthCheck through the backend's load generator.
func (r *runner) backendHealth(ctx context.Context, bu BackendUnit, target string) error {
	return retryHealth(ctx, func() error {
		out, err := bu.Load(ctx, []string{"seq", "--url", "http://" + target + "/", "--requests", "1",
			"--connect-timeout", "1s", "--response-timeout", "5s", "--csv", "-", "--quiet"})
		if err != nil {
			return err
		}
		samples, err := load.ReadCSV(strings.NewReader(string(out)))
		if err != nil {
			return err
		}
		if len(samples) == 1 && samples[0].OK() {
			return nil
		}
		return fmt.Errorf("request failed: %v", samples)
	})
}

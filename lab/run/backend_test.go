package run

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/scenario"
	"github.com/strait-net/strait/load"
)

// refusingBackend fails its preflight; it records that it was asked.
type refusingBackend struct{ checked bool }

func (b *refusingBackend) Check(context.Context, BackendPlan) error {
	b.checked = true
	return errors.New("cluster b: unreachable")
}
func (b *refusingBackend) Unit(context.Context, BackendUnitSpec) (BackendUnit, error) {
	return nil, errors.New("Unit after a failed Check")
}
func (b *refusingBackend) Metadata() any { return nil }

const backendExperiment = `name: be
topology: two-clusters-topology.yaml
scenarios: [lcl]
tools: [direct, installed]
server: a/server
client: b/client
workloads: [{name: echo, payloads: [1KB]}]
load: {requests: 3}
`

// TestBackendRefusals: what a Backend cannot run (rate, holding this
// host's CPU latency) is refused before the run directory exists, and the
// installed tool needs a Backend.
func TestBackendRefusals(t *testing.T) {
	e, err := Parse([]byte(backendExperiment), "builtin")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := Run(context.Background(), e, Options{OutDir: out}); err == nil || !strings.Contains(err.Error(), `tool "installed" measures what is installed on clusters`) {
		t.Fatalf("installed without a backend: got %v", err)
	}
	b := &refusingBackend{}
	if _, err := Run(context.Background(), e, Options{OutDir: out, Backend: b}); err == nil || !strings.Contains(err.Error(), "cluster b: unreachable") || !b.checked {
		t.Fatalf("a failed preflight: got %v (checked %v)", err, b.checked)
	}
	rt, err := Parse([]byte(strings.Replace(backendExperiment, "load: {requests: 3}", "load: {requests: 3}\nrate: {rps: 10, duration: 1s, workloads: [{name: echo, payloads: [1KB]}]}", 1)), "builtin")
	if err != nil {
		t.Fatal(err)
	}
	rb := &refusingBackend{}
	if _, err := Run(context.Background(), rt, Options{OutDir: out, Backend: rb}); err == nil || !strings.Contains(err.Error(), "the experiment also has rate") || rb.checked {
		t.Fatalf("rate on a backend: got %v (preflight asked: %v)", err, rb.checked)
	}
	ct, err := Parse([]byte(backendExperiment+"cpu-latency: 0\n"), "builtin")
	if err != nil {
		t.Fatal(err)
	}
	cb := &refusingBackend{}
	if _, err := Run(context.Background(), ct, Options{OutDir: out, Backend: cb}); err == nil || !strings.Contains(err.Error(), "cpu-latency: it holds this host's CPUs") || cb.checked {
		t.Fatalf("cpu-latency on a backend: got %v (preflight asked: %v)", err, cb.checked)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("refused runs left %s", filepath.Join(out, entries[0].Name()))
	}
}

// localBackend runs a unit's workloads and load generator as processes on
// this host's loopback: the runner's side of a Backend (units, health
// check, cells, raw CSVs from the load generator's standard output,
// metadata) without clusters. lab/kube's TestRunOnClusters runs the same
// runner on real clusters.
type localBackend struct {
	t         *testing.T
	bin       string
	units     []string
	scenarios []scenario.Scenario
	closed    int
	targets   map[string]string
}

func (b *localBackend) Check(context.Context, BackendPlan) error { return nil }
func (b *localBackend) Metadata() any                            { return map[string]any{"units": b.units} }
func (b *localBackend) Unit(_ context.Context, u BackendUnitSpec) (BackendUnit, error) {
	b.units = append(b.units, u.ID)
	b.scenarios = append(b.scenarios, u.Scenario)
	b.targets = map[string]string{}
	for _, s := range u.Services {
		addr := testenv.FreeAddr(b.t)
		testenv.Start(b.t, b.bin, append(s.Args, "--listen", addr)...)
		b.targets[s.Name] = addr
	}
	return b, nil
}
func (b *localBackend) Tool(_ context.Context, name string) (map[string]string, string, error) {
	return b.targets, "local " + name, nil
}
func (b *localBackend) Load(ctx context.Context, args []string) ([]byte, error) {
	return exec.CommandContext(ctx, b.bin, append([]string{"load"}, args...)...).Output()
}
func (b *localBackend) Close(context.Context) error { b.closed++; return nil }

// runLocalBackend runs e through a localBackend and fails the test if the
// run fails.
func runLocalBackend(t *testing.T, e *Experiment) (*localBackend, *Result) {
	t.Helper()
	b := &localBackend{t: t, bin: testenv.StraitBinary(t)}
	res, err := Run(context.Background(), e, Options{OutDir: t.TempDir(), Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	return b, res
}

func TestBackendRun(t *testing.T) {
	exp := strings.Replace(strings.Replace(backendExperiment, "tools: [direct, installed]", "tools: [direct, installed]\nrepetitions: 2", 1),
		"workloads: [{name: echo, payloads: [1KB]}]", "workloads: [{name: echo, payloads: [1KB]}, {name: echo, payloads: [1KB], keepalive: false}]", 1)
	e, err := Parse([]byte(exp), "builtin")
	if err != nil {
		t.Fatal(err)
	}
	b, res := runLocalBackend(t, e)
	if len(b.units) != 2 || b.closed != 2 {
		t.Errorf("units %v, closed %d: want two, both closed", b.units, b.closed)
	}
	if len(res.Cells) != 4 {
		t.Fatalf("cells %+v: want direct and installed × echo and echo-newconn", res.Cells)
	}
	for _, c := range res.Cells {
		if c.Count != 6 || c.Errors != 0 {
			t.Errorf("%+v: want 6 requests (3 × 2 repetitions), no errors", c.Cell)
		}
		for rep := 1; rep <= 2; rep++ {
			f, err := os.Open(rawPath(res.Dir, c.Cell, rep))
			if err != nil {
				t.Fatal(err)
			}
			samples, err := load.ReadCSV(f)
			f.Close()
			if err != nil || len(samples) != 3 {
				t.Errorf("%s: %d samples, %v", rawPath(res.Dir, c.Cell, rep), len(samples), err)
			}
		}
	}
	var md struct {
		Tools    map[string]string `json:"tools"`
		Clusters struct {
			Units []string `json:"units"`
		} `json:"clusters"`
	}
	raw, err := os.ReadFile(filepath.Join(res.Dir, "metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &md); err != nil {
		t.Fatal(err)
	}
	if md.Tools["installed"] != "local installed" || len(md.Clusters.Units) != 2 {
		t.Errorf("metadata: tools %v, backend's %v", md.Tools, md.Clusters)
	}
	if _, err := os.Stat(filepath.Join(res.Dir, "report.html")); err != nil {
		t.Error(err)
	}
}

// TestComposePathRun: with --compose-path, the units get the composed
// scenario (a backend applies its Path, which is then the WAN's alone) and
// metadata.json records the links as defined beside the composed ones.
func TestComposePathRun(t *testing.T) {
	exp := strings.Replace(strings.Replace(backendExperiment, "scenarios: [lcl]", "define-scenarios: [{name: d3, lan: {delay: 1ms, loss: 0.1%}, wan: {delay: 1ms}}]\nscenarios: [d3]", 1),
		"tools: [direct, installed]", "tools: [direct]", 1)
	e, err := Parse([]byte(exp), "builtin")
	if err != nil {
		t.Fatal(err)
	}
	defined := e.scenarios[0]
	if err := e.Override(Overrides{ComposePath: true}); err != nil {
		t.Fatal(err)
	}
	b, res := runLocalBackend(t, e)
	if len(b.scenarios) != 1 {
		t.Fatalf("the backend got scenarios %+v, want one unit's", b.scenarios)
	}
	got := b.scenarios[0]
	if !got.LAN.IsZero() || got.WAN != defined.Path() || got.Path() != defined.Path() || got.WAN.Delay != 3e6 {
		t.Errorf("the unit's scenario: lan %v, wan %v; want none and %v (3 ms)", got.LAN, got.WAN, defined.Path())
	}
	var md struct {
		Scenarios []map[string]string `json:"scenarios"`
	}
	raw, err := os.ReadFile(filepath.Join(res.Dir, "metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &md); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"name": "d3", "lan": got.LAN.String(), "wan": defined.Path().String(),
		"composedFrom": "lan " + defined.LAN.String() + "; wan " + defined.WAN.String()}
	if len(md.Scenarios) != 1 || !maps.Equal(md.Scenarios[0], want) {
		t.Errorf("metadata.json scenarios %v, want [%v]", md.Scenarios, want)
	}
}

// TestBackendThroughput: a throughput section runs through a Backend as in
// the namespace lab: the stream server among the unit's services, `strait
// load stream` by the backend's load generator after the workloads' cells,
// its JSON result in raw/, throughput.json and the table written.
func TestBackendThroughput(t *testing.T) {
	exp := strings.Replace(strings.Replace(backendExperiment, "tools: [direct, installed]", "tools: [direct]", 1),
		"load: {requests: 3}", "load: {requests: 3}\nthroughput: {streams: [1, 2], duration: 300ms, rr: [64]}", 1)
	e, err := Parse([]byte(exp), "builtin")
	if err != nil {
		t.Fatal(err)
	}
	b, res := runLocalBackend(t, e)
	if _, ok := b.targets[streamService]; !ok {
		t.Fatalf("the unit's services %v have no %s server", b.targets, streamService)
	}
	for _, c := range e.Throughput.cells("lcl", "direct") {
		got, err := readResult[load.StreamResult](throughputPath(res.Dir, c, 1, 1))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		switch {
		case c.RR > 0 && (got.Mode != "rr" || got.Transactions == 0 || got.Parallel != c.Streams):
			t.Errorf("%+v: result %+v, want rr transactions on %d connections", c, got, c.Streams)
		case c.RR == 0 && (got.Mode != "stream" || got.Bytes == 0 || got.Parallel != c.Streams):
			t.Errorf("%+v: result %+v, want bytes on %d streams", c, got, c.Streams)
		}
	}
	var sums []map[string]any
	raw, err := os.ReadFile(filepath.Join(res.Dir, "throughput.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &sums); err != nil {
		t.Fatal(err)
	}
	if len(sums) != 4 {
		t.Errorf("throughput.json has %d cells, want bulk and rr × 1 and 2 streams: %s", len(sums), raw)
	}
	table, err := os.ReadFile(filepath.Join(res.Dir, "table.txt"))
	if err != nil || !strings.Contains(string(table), "mean Gbit/s") {
		t.Errorf("table.txt has no throughput table (%v):\n%s", err, table)
	}
}

// TestDecodeStreamOutput: the result is found after `strait load stream`'s
// table, and anything else is an error saying what was there.
func TestDecodeStreamOutput(t *testing.T) {
	const result = "{\n  \"mode\": \"stream\",\n  \"gbit_s\": 1.5,\n  \"parallel\": 1\n}\n"
	for _, tc := range []struct {
		name, out, err string
	}{
		{"table then result", "stream client-to-server, 1 stream(s), 2s, cc bbr\nstream  bytes\n1  10\n" + result, ""},
		{"result alone", result, ""},
		{"no result", "stream client-to-server\n", "no JSON result"},
		{"truncated", "table\n{\n  \"mode\": \"stream\",", "JSON result"},
		{"trailing", "table\n" + result + "more\n", "follows it"},
		{"not a stream result", "table\n{\"mode\": \"seq\"}\n", `mode "seq"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, raw, err := decodeStreamOutput([]byte(tc.out))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Gbps != 1.5 || string(raw) != result {
				t.Errorf("result %+v, raw %q; want 1.5 Gbit/s and the JSON as printed", res, raw)
			}
		})
	}
}

// FuzzDecodeStreamOutput: whatever a load generator prints, decoding it
// fails cleanly or yields a result whose raw JSON decodes alone.
func FuzzDecodeStreamOutput(f *testing.F) {
	f.Add([]byte("stream x\n{\"mode\": \"stream\", \"bytes\": 3}\n"))
	f.Add([]byte("{\"mode\": \"rr\"}"))
	f.Add([]byte("a\n{\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		res, raw, err := decodeStreamOutput(out)
		if err != nil {
			return
		}
		var again load.StreamResult
		if err := json.Unmarshal(raw, &again); err != nil || again.Mode != res.Mode {
			t.Fatalf("raw %q does not decode to the result (%v)", raw, err)
		}
	})
}

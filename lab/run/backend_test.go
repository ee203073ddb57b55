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

// TestBackendRefusals: what a Backend cannot run is refused before the run
// directory exists, and the installed tool needs a Backend.
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
	tp, err := Parse([]byte(strings.Replace(backendExperiment, "load: {requests: 3}", "load: {requests: 3}\nthroughput: {streams: [1]}", 1)), "builtin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), tp, Options{OutDir: out, Backend: &refusingBackend{}}); err == nil || !strings.Contains(err.Error(), "throughput (in scenario lcl)") {
		t.Fatalf("throughput on a backend: got %v", err)
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
		testenv.Start(b.t, b.bin, "app", s.Name, "--listen", addr)
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

func TestBackendRun(t *testing.T) {
	exp := strings.Replace(strings.Replace(backendExperiment, "tools: [direct, installed]", "tools: [direct, installed]\nrepetitions: 2", 1),
		"workloads: [{name: echo, payloads: [1KB]}]", "workloads: [{name: echo, payloads: [1KB]}, {name: echo, payloads: [1KB], keepalive: false}]", 1)
	e, err := Parse([]byte(exp), "builtin")
	if err != nil {
		t.Fatal(err)
	}
	b := &localBackend{t: t, bin: testenv.StraitBinary(t)}
	res, err := Run(context.Background(), e, Options{OutDir: t.TempDir(), Backend: b})
	if err != nil {
		t.Fatal(err)
	}
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
	b := &localBackend{t: t, bin: testenv.StraitBinary(t)}
	res, err := Run(context.Background(), e, Options{OutDir: t.TempDir(), Backend: b})
	if err != nil {
		t.Fatal(err)
	}
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

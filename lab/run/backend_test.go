package run

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

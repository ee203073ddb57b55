package kube

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/run"
	"github.com/strait-net/strait/lab/scenario"
)

// noEmulator is an Emulator Check must not call: it refuses scenarios
// before it contacts anything.
type noEmulator struct{}

func (noEmulator) Apply(context.Context, string, []EmuTarget, emulation.Params) (Applied, error) {
	return nil, errors.New("Apply called")
}
func (noEmulator) Down(context.Context, *rest.Config, string) error { return errors.New("Down called") }
func (noEmulator) Needs() EmuNeeds                                  { return EmuNeeds{} }

func TestCheckRefusesLinkScenarios(t *testing.T) {
	m, err := ParseClusterMap([]byte("clusters: {a: {}, b: {}}\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Options{Clusters: m, Emulator: noEmulator{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sc   scenario.Scenario
		want string
	}{
		{scenario.Scenario{Name: "big", MTU: 9000}, "scenario big sets the MTU (9000): runs on clusters keep the clusters' MTU"},
		{scenario.Scenario{Name: scenario.AsDeclared, AsDeclared: true}, "scenario as-declared: runs on clusters have no topology links"},
	} {
		err := b.Check(context.Background(), run.BackendPlan{Server: "a/server", Client: "b/client", Scenarios: []scenario.Scenario{tc.sc}, Tools: []string{"direct"}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("scenario %s: got %v, want an error containing %q", tc.sc.Name, err, tc.want)
		}
	}
}

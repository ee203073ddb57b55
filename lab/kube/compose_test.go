package kube

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/run"
	"github.com/strait-net/strait/lab/scenario"
)

func TestPathParams(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	edg10, err := scenario.Lookup("edg10")
	if err != nil {
		t.Fatal(err)
	}
	// seed 000: LAN = WAN = 5 ms ± 1 ms, 0.08 %: three of them in a row.
	got := PathParams(edg10)
	if got.Delay != 15*time.Millisecond {
		t.Errorf("edg10 delay %v, want 15ms", got.Delay)
	}
	if want := time.Duration(math.Round(math.Sqrt(3) * float64(time.Millisecond))); got.Jitter != want {
		t.Errorf("edg10 jitter %v, want %v (√3 × 1ms)", got.Jitter, want)
	}
	if want := 100 * (1 - math.Pow(1-0.0008, 3)); !near(got.Loss, want) {
		t.Errorf("edg10 loss %v %%, want %v %%", got.Loss, want)
	}
	if got.Dist() != edg10.WAN.Dist() {
		t.Errorf("edg10 distribution %s, want the scenario's %s", got.Dist(), edg10.WAN.Dist())
	}
	// seed 001's cloud scenarios impair the WAN only: it is the path.
	cloud10, err := scenario.Lookup("cloud10")
	if err != nil {
		t.Fatal(err)
	}
	if got := PathParams(cloud10); got != cloud10.WAN {
		t.Errorf("cloud10 path %+v, want the WAN's %+v", got, cloud10.WAN)
	}
	lcl, err := scenario.Lookup("lcl")
	if err != nil {
		t.Fatal(err)
	}
	if got := PathParams(lcl); !got.IsZero() {
		t.Errorf("lcl path %+v, want nothing", got)
	}
}

func TestCompose(t *testing.T) {
	// Uniform ±3 ms has σ = √3 ms, normal 1 ms σ = 1 ms: the sum has
	// σ = 2 ms, expressed in the larger's distribution (uniform: J = √3 σ).
	got := Compose(
		emulation.Params{Delay: time.Millisecond, Jitter: 3 * time.Millisecond, Rate: 10e6},
		emulation.Params{Delay: 2 * time.Millisecond, Jitter: time.Millisecond, Distribution: emulation.Normal, Loss: 50, Rate: 5e6},
		emulation.Params{Loss: 50},
		emulation.Params{},
	)
	want := emulation.Params{Delay: 3 * time.Millisecond, Jitter: time.Duration(math.Round(2 * math.Sqrt(3) * 1e6)), Distribution: emulation.Uniform, Loss: 75, Rate: 5e6}
	if got != want {
		t.Errorf("Compose = %+v, want %+v", got, want)
	}
	if got := Compose(); !got.IsZero() {
		t.Errorf("Compose() = %+v, want nothing", got)
	}
}

// noEmulator is an Emulator Check must not call: it refuses scenarios
// before it contacts anything.
type noEmulator struct{}

func (noEmulator) Apply(context.Context, string, []EmuTarget, emulation.Params) (Applied, error) {
	return nil, errors.New("Apply called")
}
func (noEmulator) Down(context.Context, *rest.Config, string) error { return errors.New("Down called") }

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

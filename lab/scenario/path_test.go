package scenario

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/topology"
)

func TestPath(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	edg10, err := Lookup("edg10")
	if err != nil {
		t.Fatal(err)
	}
	// seed 000: LAN = WAN = 5 ms ± 1 ms, 0.08 %: three of them in a row.
	got := edg10.Path()
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
	cloud10, err := Lookup("cloud10")
	if err != nil {
		t.Fatal(err)
	}
	if got := cloud10.Path(); got != cloud10.WAN {
		t.Errorf("cloud10 path %+v, want the WAN's %+v", got, cloud10.WAN)
	}
	lcl, err := Lookup("lcl")
	if err != nil {
		t.Fatal(err)
	}
	if got := lcl.Path(); !got.IsZero() {
		t.Errorf("lcl path %+v, want nothing", got)
	}
	// The WAN's queue and loss model stay the path's.
	s := Scenario{Name: "q", LAN: emulation.Params{Delay: time.Millisecond}, WAN: emulation.Params{Delay: time.Millisecond, Loss: 1, LossCorrelation: 25, Limit: 50, Reorder: true}}
	if got := s.Path(); got.LossCorrelation != 25 || got.Limit != 50 || !got.Reorder || got.Delay != 3*time.Millisecond {
		t.Errorf("path %+v: want delay 3ms and the WAN's correlation, limit and reordering", got)
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
	// Three links of 0.04 % compose to 0.11995201 %; people read four digits.
	if got, want := Compose(emulation.Params{Loss: 0.04}, emulation.Params{Loss: 0.04}, emulation.Params{Loss: 0.04}).String(), "loss 0.12%"; got != want {
		t.Errorf("composed loss renders as %q, want %q", got, want)
	}
}

// TestComposePath checks the namespace lab's composed scenario against what
// a run on clusters applies: for every catalog scenario, its WAN links get
// Path in both directions, its LAN links nothing, and composing again (as
// a run on clusters of a composed scenario does) changes nothing.
func TestComposePath(t *testing.T) {
	topo, err := topology.Load("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Names() {
		s, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.ComposePath()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Name != s.Name || c.Catalog != s.Catalog || c.MTU != s.MTU {
			t.Errorf("%s: composed as %s of %s (MTU %d): want the same name, catalog and MTU", name, c.Name, c.Catalog, c.MTU)
		}
		if want := "lan " + s.LAN.String() + "; wan " + s.WAN.String(); c.ComposedFrom != want {
			t.Errorf("%s: ComposedFrom %q, want %q", name, c.ComposedFrom, want)
		}
		if !c.LAN.IsZero() || c.WAN != s.Path() {
			t.Errorf("%s: composed lan %v, wan %v; want none and %v", name, c.LAN, c.WAN, s.Path())
		}
		if got := c.Path(); got != s.Path() {
			t.Errorf("%s: the composed scenario's path %v, want the scenario's %v", name, got, s.Path())
		}
		again, err := c.ComposePath()
		if err != nil || again != c {
			t.Errorf("%s: composing twice gave %+v, %v; want %+v", name, again, err, c)
		}
		p, err := topo.Plan()
		if err != nil {
			t.Fatal(err)
		}
		c.Apply(p)
		for _, l := range p.Links {
			want := emulation.Params{}
			if l.Class == topology.WAN {
				want = s.Path()
			}
			if l.AtoB != want || l.BtoA != want {
				t.Errorf("%s: %s (%s): %v / %v, want %v both ways", name, l.Name, l.Class, l.AtoB, l.BtoA, want)
			}
		}
	}
	edg10, err := Lookup("edg10")
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := edg10.ComposePath(); c.WAN.Delay != 15*time.Millisecond || !strings.Contains(c.Description, "composed") {
		t.Errorf("edg10 composed: wan %v, description %q", c.WAN, c.Description)
	}
	decl, err := Lookup(AsDeclared)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decl.ComposePath(); err == nil || !strings.Contains(err.Error(), "scenario as-declared: nothing to compose") {
		t.Errorf("as-declared: got %v, want an error saying there is nothing to compose", err)
	}
}

package lab

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/topology"
)

// These cases never reach the netem probe, so they need no namespace.
func TestChooseBackendsRateOnly(t *testing.T) {
	rate := emulation.Params{Rate: 100_000_000}
	delayed := emulation.Params{Rate: 100_000_000, Delay: 2_000_000}
	plan := &topology.Plan{Links: []topology.PlanLink{
		{Name: "lan"},
		{Name: "up", AtoB: rate},
		{Name: "both", AtoB: rate, BtoA: rate},
	}}
	for _, want := range []string{"", BackendAuto, BackendTBF} {
		backend, kinds, err := chooseBackends(context.Background(), plan, Options{Emulator: want})
		if err != nil {
			t.Fatalf("emulator %q: %v", want, err)
		}
		if backend != BackendTBF || !slices.Equal(kinds, []string{BackendNone, BackendTBF, BackendTBF}) {
			t.Errorf("emulator %q: backend %s, links %v; want tbf, [none tbf tbf]", want, backend, kinds)
		}
	}
	backend, kinds, err := chooseBackends(context.Background(), plan, Options{Emulator: BackendUserspace})
	if err != nil || backend != BackendUserspace || kinds[1] != BackendUserspace {
		t.Errorf("emulator userspace: %s %v %v; want the userspace emulator for every impaired link", backend, kinds, err)
	}
	plan.Links = append(plan.Links, topology.PlanLink{Name: "wan", AtoB: rate, BtoA: delayed})
	_, _, err = chooseBackends(context.Background(), plan, Options{Emulator: BackendTBF})
	if err == nil || !strings.Contains(err.Error(), "wan") {
		t.Errorf("emulator tbf with a delayed link: err %v, want one naming link wan", err)
	}
}

func TestTBFSummary(t *testing.T) {
	got := tbfSummary(emulation.Params{Rate: 100_000_000})
	// 1000 packets of 1500 B at 100 Mbit/s drain in 120 ms.
	if want := "100mbit burst 25000 B queue 1500000 B (120ms)"; got != want {
		t.Errorf("tbfSummary = %q, want %q", got, want)
	}
}

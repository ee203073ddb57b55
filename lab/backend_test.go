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

// Links that hold no packet back either way go to the kernel backend under
// auto; a link delayed one way stays with the general backend both ways.
// These cases never reach the netem probe either.
func TestChooseBackendsUndelayed(t *testing.T) {
	lossy := emulation.Params{Loss: 1, LossCorrelation: 25}
	plan := &topology.Plan{Links: []topology.PlanLink{
		{Name: "lan"},
		{Name: "loss", AtoB: lossy, BtoA: lossy},
		{Name: "oneway", AtoB: lossy},
		{Name: "mixed", AtoB: emulation.Params{Rate: 100_000_000}, BtoA: lossy},
		{Name: "rate", AtoB: emulation.Params{Rate: 100_000_000}},
	}}
	for _, want := range []string{"", BackendAuto} {
		backend, kinds, err := chooseBackends(context.Background(), plan, Options{Emulator: want})
		if err != nil {
			t.Fatalf("emulator %q: %v", want, err)
		}
		wantKinds := []string{BackendNone, BackendKernel, BackendKernel, BackendKernel, BackendTBF}
		if backend != "kernel+tbf" || !slices.Equal(kinds, wantKinds) {
			t.Errorf("emulator %q: backend %s, links %v; want kernel+tbf, %v", want, backend, kinds, wantKinds)
		}
		got := kernelSummaries(plan, kinds)
		wantSum := []string{
			"loss a-to-b: loss 1% correlation 25% (bpf)", "loss b-to-a: loss 1% correlation 25% (bpf)",
			"oneway a-to-b: loss 1% correlation 25% (bpf)",
			"mixed a-to-b: 100mbit burst 25000 B queue 1500000 B (120ms) (tbf)", "mixed b-to-a: loss 1% correlation 25% (bpf)",
		}
		if !slices.Equal(got, wantSum) {
			t.Errorf("kernel summaries:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantSum, "\n"))
		}
	}
	backend, kinds, err := chooseBackends(context.Background(), plan, Options{Emulator: BackendUserspace})
	if err != nil || backend != BackendUserspace || kinds[1] != BackendUserspace {
		t.Errorf("emulator userspace: %s %v %v; want the userspace emulator for every impaired link", backend, kinds, err)
	}
	if !undelayed(plan.Links[1]) || undelayed(topology.PlanLink{AtoB: lossy, BtoA: emulation.Params{Delay: 1}}) {
		t.Error("undelayed: want true for a loss-only link, false for one delayed one way")
	}
}

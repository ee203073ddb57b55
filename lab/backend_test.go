package lab

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/topology"
)

// fakeProbes replaces the netem and tcx probes for one test, with the
// answers given (nil: present), and counts their calls.
func fakeProbes(t *testing.T, netem, tcx error) (netemCalls, tcxCalls *int) {
	t.Helper()
	netemCalls, tcxCalls = new(int), new(int)
	oldNetem, oldTCX := probeNetem, probeTCX
	probeNetem = func(context.Context, string) error { *netemCalls++; return netem }
	probeTCX = func(context.Context, string) error { *tcxCalls++; return tcx }
	t.Cleanup(func() { probeNetem, probeTCX = oldNetem, oldTCX })
	return netemCalls, tcxCalls
}

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
		backend, kinds, _, err := chooseBackends(context.Background(), plan, Options{Emulator: want})
		if err != nil {
			t.Fatalf("emulator %q: %v", want, err)
		}
		if backend != BackendTBF || !slices.Equal(kinds, []string{BackendNone, BackendTBF, BackendTBF}) {
			t.Errorf("emulator %q: backend %s, links %v; want tbf, [none tbf tbf]", want, backend, kinds)
		}
	}
	backend, kinds, _, err := chooseBackends(context.Background(), plan, Options{Emulator: BackendUserspace})
	if err != nil || backend != BackendUserspace || kinds[1] != BackendUserspace {
		t.Errorf("emulator userspace: %s %v %v; want the userspace emulator for every impaired link", backend, kinds, err)
	}
	plan.Links = append(plan.Links, topology.PlanLink{Name: "wan", AtoB: rate, BtoA: delayed})
	_, _, _, err = chooseBackends(context.Background(), plan, Options{Emulator: BackendTBF})
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
// auto; a link delayed one way goes to the split backend
// (TestChooseBackendsOneWay).
// These cases never reach the netem probe either.
func TestChooseBackendsUndelayed(t *testing.T) {
	netemCalls, _ := fakeProbes(t, errors.New("no netem"), nil)
	lossy := emulation.Params{Loss: 1, LossCorrelation: 25}
	plan := &topology.Plan{Nodes: []topology.PlanNode{{Netns: "st-x-a-b"}}, Links: []topology.PlanLink{
		{Name: "lan"},
		{Name: "loss", AtoB: lossy, BtoA: lossy},
		{Name: "oneway", AtoB: lossy},
		{Name: "mixed", AtoB: emulation.Params{Rate: 100_000_000}, BtoA: lossy},
		{Name: "rate", AtoB: emulation.Params{Rate: 100_000_000}},
	}}
	for _, want := range []string{"", BackendAuto} {
		backend, kinds, _, err := chooseBackends(context.Background(), plan, Options{Emulator: want})
		if err != nil {
			t.Fatalf("emulator %q: %v", want, err)
		}
		wantKinds := []string{BackendNone, BackendKernel, BackendKernel, BackendKernel, BackendTBF}
		if backend != "kernel+tbf" || !slices.Equal(kinds, wantKinds) {
			t.Errorf("emulator %q: backend %s, links %v; want kernel+tbf, %v", want, backend, kinds, wantKinds)
		}
		got := kernelSummaries(plan, kinds, BackendKernel)
		wantSum := []string{
			"loss a-to-b: loss 1% correlation 25% (bpf)", "loss b-to-a: loss 1% correlation 25% (bpf)",
			"oneway a-to-b: loss 1% correlation 25% (bpf)",
			"mixed a-to-b: 100mbit burst 25000 B queue 1500000 B (120ms) (tbf)", "mixed b-to-a: loss 1% correlation 25% (bpf)",
		}
		if !slices.Equal(got, wantSum) {
			t.Errorf("kernel summaries:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantSum, "\n"))
		}
	}
	backend, kinds, _, err := chooseBackends(context.Background(), plan, Options{Emulator: BackendUserspace})
	if err != nil || backend != BackendUserspace || kinds[1] != BackendUserspace {
		t.Errorf("emulator userspace: %s %v %v; want the userspace emulator for every impaired link", backend, kinds, err)
	}
	if *netemCalls != 0 {
		t.Errorf("netem probed %d times for links without delay", *netemCalls)
	}
	if !undelayed(plan.Links[1]) || undelayed(topology.PlanLink{AtoB: lossy, BtoA: emulation.Params{Delay: 1}}) {
		t.Error("undelayed: want true for a loss-only link, false for one delayed one way")
	}
}

// A link delayed one way only goes to the split backend under auto when
// the kernel has no netem, to netem when it has, and to the userspace
// emulator when it has no tcx either (with the reason), as do links
// without delay (to netem, if there is netem but no tcx); links delayed
// both ways keep the general backend.
func TestChooseBackendsOneWay(t *testing.T) {
	ms := emulation.Params{Delay: 5_000_000}
	plan := &topology.Plan{Nodes: []topology.PlanNode{{Netns: "st-x-a-b"}}, Links: []topology.PlanLink{
		{Name: "lan"},
		{Name: "wan", AtoB: ms},
		{Name: "back", AtoB: emulation.Params{Loss: 1, Rate: 100_000_000}, BtoA: emulation.Params{Delay: 5_000_000, Jitter: 1_000_000}},
		{Name: "both", AtoB: ms, BtoA: ms},
		{Name: "loss", AtoB: emulation.Params{Loss: 1}},
	}}
	for _, tc := range []struct {
		name       string
		emulator   string
		netem, tcx error
		backend    string
		kinds      []string
		why        string
	}{
		{"auto, no netem", BackendAuto, errors.New("no netem"), nil, "kernel+split+userspace",
			[]string{BackendNone, BackendSplit, BackendSplit, BackendUserspace, BackendKernel}, ""},
		{"auto, netem", "", nil, nil, "kernel+netem",
			[]string{BackendNone, BackendNetem, BackendNetem, BackendNetem, BackendKernel}, ""},
		{"auto, no netem, no tcx", BackendAuto, errors.New("no netem"), errors.New("invalid argument"), BackendUserspace,
			[]string{BackendNone, BackendUserspace, BackendUserspace, BackendUserspace, BackendUserspace}, "no tcx (Linux 6.6 or later) in this kernel (invalid argument)"},
		{"auto, netem, no tcx", BackendAuto, nil, errors.New("invalid argument"), BackendNetem,
			[]string{BackendNone, BackendNetem, BackendNetem, BackendNetem, BackendNetem}, "go to netem instead"},
		{"userspace", BackendUserspace, errors.New("no netem"), nil, BackendUserspace,
			[]string{BackendNone, BackendUserspace, BackendUserspace, BackendUserspace, BackendUserspace}, ""},
	} {
		_, tcxCalls := fakeProbes(t, tc.netem, tc.tcx)
		backend, kinds, why, err := chooseBackends(context.Background(), plan, Options{Emulator: tc.emulator})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if backend != tc.backend || !slices.Equal(kinds, tc.kinds) {
			t.Errorf("%s: backend %s, links %v; want %s, %v", tc.name, backend, kinds, tc.backend, tc.kinds)
		}
		if tc.why == "" && why != "" || !strings.Contains(why, tc.why) {
			t.Errorf("%s: why %q, want %q", tc.name, why, tc.why)
		}
		if tc.emulator == BackendUserspace && *tcxCalls != 0 {
			t.Errorf("%s: tcx probed for an explicit userspace emulator", tc.name)
		}
	}
	fakeProbes(t, errors.New("no netem"), nil)
	_, kinds, _, _ := chooseBackends(context.Background(), plan, Options{})
	got := kernelSummaries(plan, kinds, BackendSplit)
	want := []string{
		"wan a-to-b: delay 5ms (emulator, via a TAP device)", "wan b-to-a: undelayed (veth)",
		"back a-to-b: loss 1% (bpf), 100mbit burst 25000 B queue 1500000 B (120ms) (tbf)", "back b-to-a: delay 5ms jitter 1ms distribution uniform (emulator, via a TAP device)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("split summaries:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	_, _, _, err := chooseBackends(context.Background(), plan, Options{Emulator: BackendNetem})
	if err == nil || !strings.Contains(err.Error(), "no netem qdisc") {
		t.Errorf("emulator netem without netem: %v, want an error saying so", err)
	}
	if !delayedOneWay(plan.Links[1]) || !delayedOneWay(plan.Links[2]) || delayedOneWay(plan.Links[3]) || delayedOneWay(plan.Links[4]) {
		t.Error("delayedOneWay: want true for wan and back only")
	}
}

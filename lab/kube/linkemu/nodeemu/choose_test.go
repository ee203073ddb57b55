package nodeemu

import (
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/strait-net/strait/lab/emulation"
)

// TestChooseOnNode covers the agent's choice of backend with a probe of our
// own: this lab's kernel has no netem, so the netem branch is never taken
// on the real nodes here (docs/lab-clusters-emulation.md).
func TestChooseOnNode(t *testing.T) {
	delay := emulation.Params{Delay: 5 * time.Millisecond, Jitter: time.Millisecond}
	lossy := emulation.Params{Delay: 5 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.0008}
	normal := delay
	normal.Distribution = emulation.Normal
	rated := emulation.Params{Delay: 5 * time.Millisecond, Rate: 1e9}
	for _, tc := range []struct {
		name   string
		p      emulation.Params
		netem  bool
		want   Backend
		probed bool
	}{
		{"rate only: tbf, no probe", emulation.Params{Rate: 100e6}, true, TBF, false},
		{"delay, kernel has netem", delay, true, Netem, true},
		{"delay, kernel without netem (this host)", delay, false, Userspace, true},
		{"delay and rate, kernel has netem", rated, true, Netem, true},
		{"loss: userspace even with netem, no probe", lossy, true, Userspace, false},
		{"normal jitter: userspace, no probe", normal, true, Userspace, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probed := false
			got := chooseOnNode(tc.p, func() bool { probed = true; return tc.netem })
			if got != tc.want || probed != tc.probed {
				t.Errorf("chooseOnNode(%s, netem %v) = %s, probed %v; want %s, probed %v", tc.p, tc.netem, got, probed, tc.want, tc.probed)
			}
		})
	}
}

// TestNetemAttrs: the qdisc the netem backend would add carries the
// namespace lab's netem arguments (emulation.Params.NetemArgs), in
// netlink's units.
func TestNetemAttrs(t *testing.T) {
	p := emulation.Params{Delay: 5 * time.Millisecond, Jitter: time.Millisecond, Rate: 1e9}
	got := netemAttrs(p)
	// Limit: emulation.DefaultBuffer of line time (4166 packets of 1500
	// bytes) plus what 6 ms of delay holds (500), as NetemArgs says.
	want := netlink.NetemQdiscAttrs{Latency: 5000, Jitter: 1000, Limit: 4666, Rate64: 125e6}
	if got != want {
		t.Errorf("netemAttrs(%s) = %+v, want %+v", p, got, want)
	}
	if args := p.NetemArgs(); args[0] != "limit" || args[1] != "4666" {
		t.Errorf("NetemArgs(%s) = %v: the namespace lab's limit changed, and with it the want above", p, args)
	}
}

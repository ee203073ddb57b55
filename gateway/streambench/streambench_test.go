package streambench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/gateway/streambench"
	"github.com/strait-net/strait/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestBenchSmall runs the bench at a small scale on real gateway
// processes with max-streams at exactly the connections held: the figures
// are measurements, every flood connection is refused at once (reset, not
// left hanging) and counted by the gateways, the held connections keep
// echoing during the flood, and the gateways give back every descriptor
// and goroutine afterwards.
func TestBenchSmall(t *testing.T) {
	const idle, active, stalled = 120, 80, 4
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := streambench.Run(ctx, streambench.Config{Binary: testenv.StraitBinary(t), Dir: t.TempDir(),
		Idle: idle, Active: active, Stalled: stalled, Flood: 4, MaxStreams: idle + active + stalled,
		Interval: 50 * time.Millisecond, Hold: 500 * time.Millisecond, RateWorkers: 4, RateTime: 300 * time.Millisecond})
	var b strings.Builder
	streambench.WriteTable(&b, r)
	t.Log("\n" + b.String())
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxStreams != [2]int{idle + active + stalled, idle + active + stalled} {
		t.Errorf("gateways report max-streams %v, configured %d", r.MaxStreams, idle+active+stalled)
	}
	for i := range 2 {
		for _, s := range r.Snapshots {
			if s.RSS[i] == 0 || s.Heap[i] == 0 || s.FDs[i] == 0 || s.Goroutines[i] == 0 {
				t.Errorf("gateway %d, %s: %+v: not measured", i, s.Phase, s)
			}
		}
		// Each carried connection holds a descriptor and goroutines: a
		// figure below that was not read from the gateway.
		if _, fds, gr := r.PerStream(i, streambench.PhaseBase, streambench.PhaseIdle); fds < 0.9 || gr < 1 {
			t.Errorf("gateway %d: %.2f fds and %.2f goroutines per idle stream, want at least 0.9 and 1", i, fds, gr)
		}
		if s := r.Snapshot(streambench.PhaseFlood); s.Carried[i] != idle+active+stalled {
			t.Errorf("gateway %d carried %d connections at the flood, want %d", i, s.Carried[i], idle+active+stalled)
		}
		a, base := r.Snapshot(streambench.PhaseAfter), r.Snapshot(streambench.PhaseBase)
		// Two descriptors of slack: warm target connections redialed.
		if a.Carried[i] != 0 || a.FDs[i] > base.FDs[i]+2 {
			t.Errorf("gateway %d after the bench: %d connections carried, %d fds (base %d): not released", i, a.Carried[i], a.FDs[i], base.FDs[i])
		}
	}
	if r.RateDirect <= 0 || r.RateStrait <= 0 || r.RateErrors != 0 {
		t.Errorf("connection rate direct %.0f/s, strait %.0f/s, %d failed", r.RateDirect, r.RateStrait, r.RateErrors)
	}
	phases := map[string]streambench.Latency{}
	for _, l := range r.Latency {
		phases[l.Phase] = l
	}
	for _, p := range []string{streambench.PhaseActive, streambench.PhaseFlood, streambench.PhaseStalled} {
		if l := phases[p]; l.N < active || l.Errors != 0 || l.P50 <= 0 {
			t.Errorf("echo during %s: %+v, want every active connection echoing (%d) and no errors", p, l, active)
		}
	}
	switch {
	case r.FloodTried == 0:
		t.Error("the flood tried no connection")
	case r.FloodRefused != r.FloodTried:
		t.Errorf("flood past max-streams: %d tried, %d refused, %d served, %d hung: want all refused", r.FloodTried, r.FloodRefused, r.FloodServed, r.FloodHung)
	case r.FloodCounted != float64(r.FloodRefused):
		t.Errorf("gateways counted %.0f refusals, the clients saw %d", r.FloodCounted, r.FloodRefused)
	}
	if r.StalledBytes == 0 {
		t.Error("the stalled clients wrote nothing")
	}
}

// TestIngressLimit floods an exporting gateway whose max-streams is the
// connections held while the importing one has room: the exporting
// gateway refuses the incoming streams with a reset (counted at its
// ingress), the importing one resets their clients, and none is served.
func TestIngressLimit(t *testing.T) {
	const idle, active = 20, 10
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := streambench.Run(ctx, streambench.Config{Binary: testenv.StraitBinary(t), Dir: t.TempDir(),
		Idle: idle, Active: active, Flood: 2, MaxStreams: 1000, MaxStreamsExporting: idle + active,
		Interval: 50 * time.Millisecond, Hold: 300 * time.Millisecond, RateWorkers: 2, RateTime: 100 * time.Millisecond})
	var b strings.Builder
	streambench.WriteTable(&b, r)
	t.Log("\n" + b.String())
	if err != nil {
		t.Fatal(err)
	}
	f := r.Snapshot(streambench.PhaseFlood)
	switch {
	case r.FloodTried == 0 || r.FloodRefused != r.FloodTried:
		t.Errorf("flood past the exporting gateway's max-streams: %d tried, %d refused, %d served, %d hung: want all refused", r.FloodTried, r.FloodRefused, r.FloodServed, r.FloodHung)
	case f.Refused[0] != 0 || f.Refused[1] != float64(r.FloodRefused):
		t.Errorf("refusals counted: importing %.0f, exporting %.0f; want 0 and %d", f.Refused[0], f.Refused[1], r.FloodRefused)
	}
}

// TestMemoryReturned holds a burst of streams through real gateway
// processes (half idle, half echoing, a flood past max-streams), closes
// them and waits until both gateways' resident memory is back within the
// issue's 10 % of the start plus settlePerStream per stream held: the
// gateways return freed memory a few seconds after a burst
// (gateway/reclaim.go) and count it. Before, the RSS stayed 1.4–1.5 times
// the start until the runtime's forced collection two minutes later
// (README, Concurrency limits).
func TestMemoryReturned(t *testing.T) {
	const idle, active = 1000, 1000
	// What the Go runtime keeps of a burst for good: every goroutine's
	// descriptor (480 bytes in a heap profile, two goroutines per carried
	// connection at each gateway) and the heap that holds them. Measured
	// at 10 000 streams, 1.4–1.8 KiB per stream above 110 % of the start
	// after a reclaim (README); 3 KiB leaves room for a loaded machine.
	const settlePerStream = 3 << 10
	// The gateways reclaim 5–7 s after the close (a second's sampling and
	// reclaimQuiet). Without that, the Go runtime's own collection forced
	// every two minutes and its scavenger brought the old build within
	// this test's bound 2 min 34 s after the close (README): waiting less
	// than the two minutes tells the two apart, and 100 s is still about
	// 15 times what the reclaim takes, to bound only a hang.
	const settleWithin = 100 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := streambench.Run(ctx, streambench.Config{Binary: testenv.StraitBinary(t), Dir: t.TempDir(),
		Idle: idle, Active: active, Flood: 4, MaxStreams: idle + active,
		Interval: 500 * time.Millisecond, Hold: 2 * time.Second, RateWorkers: 2, RateTime: 200 * time.Millisecond,
		Settle: settleWithin, SettlePerStream: settlePerStream})
	var b strings.Builder
	streambench.WriteTable(&b, r)
	t.Log("\n" + b.String())
	if err != nil {
		t.Fatal(err)
	}
	base, peak, s := r.Snapshot(streambench.PhaseBase), r.Snapshot(streambench.PhaseFlood), r.Snapshot(streambench.PhaseSettled)
	for i := range 2 {
		if peak.RSS[i] <= base.RSS[i]+(idle+active)*settlePerStream {
			t.Errorf("gateway %d: RSS %d at the peak, %d at the start: the burst did not take the memory this test waits to see returned", i, peak.RSS[i], base.RSS[i])
		}
		if limit := 1.1*float64(base.RSS[i]) + (idle+active)*settlePerStream; float64(s.RSS[i]) > limit {
			t.Errorf("gateway %d: RSS %d %v after the close, want at most %.0f (start %d)", i, s.RSS[i], r.SettledAfter, limit, base.RSS[i])
		}
		if s.Reclaims[i] < 1 {
			t.Errorf("gateway %d counted %d reclaims after the burst", i, s.Reclaims[i])
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []streambench.Config{
		{},
		{Binary: "x", Idle: -1},
		{Binary: "x", PerImport: 20001},
		{Binary: "x", Hold: -time.Second},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
	if err := (&streambench.Config{Binary: "x", Idle: 10}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestUDPFlood floods a UDP import through real gateway processes beside
// echoing TCP connections and a UDP echo on another import: the flood's
// datagrams are sent and reach its target (no more than were sent), both
// victims are answered without and during the flood, the gateways hold a
// flow per flooding socket meanwhile, and afterwards (flows ending after
// a 1 s idle timeout) every flow, descriptor and goroutine is released.
func TestUDPFlood(t *testing.T) {
	const active, flooders = 20, 2
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := streambench.Run(ctx, streambench.Config{Binary: testenv.StraitBinary(t), Dir: t.TempDir(),
		Active: active, UDPFlood: flooders, UDPFloodRate: 4000, UDPIdle: time.Second,
		Interval: 50 * time.Millisecond, Hold: 500 * time.Millisecond, RateWorkers: 2, RateTime: 200 * time.Millisecond})
	var b strings.Builder
	streambench.WriteTable(&b, r)
	t.Log("\n" + b.String())
	if err != nil {
		t.Fatal(err)
	}
	f := r.UDPFlood
	if f.Sent == 0 || f.Delivered == 0 || f.Delivered > f.Sent {
		t.Errorf("udp flood: %+v: want datagrams sent and delivered, no more delivered than sent", f)
	}
	if len(r.UDPLatency) != 2 || r.UDPLatency[0].Phase != streambench.PhaseActive || r.UDPLatency[1].Phase != streambench.PhaseUDPFlood {
		t.Fatalf("udp echo phases %+v, want %s then %s", r.UDPLatency, streambench.PhaseActive, streambench.PhaseUDPFlood)
	}
	for _, l := range r.UDPLatency {
		if l.Sent == 0 || l.Received == 0 || l.P50 <= 0 {
			t.Errorf("udp echo during %s: %+v: not answered", l.Phase, l)
		}
	}
	for _, l := range r.Latency {
		if (l.Phase == streambench.PhaseActive || l.Phase == streambench.PhaseUDPFlood) && (l.N < active || l.Errors != 0) {
			t.Errorf("tcp echo during %s: %+v, want every active connection echoing (%d) and no errors", l.Phase, l, active)
		}
	}
	fl, a, base := r.Snapshot(streambench.PhaseUDPFlood), r.Snapshot(streambench.PhaseAfter), r.Snapshot(streambench.PhaseBase)
	for i := range 2 {
		if fl.UDPFlows[i] < flooders {
			t.Errorf("gateway %d held %d udp flows during the flood of %d sockets", i, fl.UDPFlows[i], flooders)
		}
		// Slack as in TestBenchSmall: warm target connections, a scrape.
		if a.UDPFlows[i] != 0 || a.Carried[i] != 0 || a.FDs[i] > base.FDs[i]+2 || a.Goroutines[i] > base.Goroutines[i]+4 {
			t.Errorf("gateway %d after the flood: %d udp flows, %d connections, %d fds (base %d), %d goroutines (base %d): not released",
				i, a.UDPFlows[i], a.Carried[i], a.FDs[i], base.FDs[i], a.Goroutines[i], base.Goroutines[i])
		}
	}
}

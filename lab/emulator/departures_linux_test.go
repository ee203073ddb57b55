package emulator

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/emulation"
)

// TestDepartureStamps checks that the writer learns, from the kernel, when
// a packet it writes into a TUN device enters the namespace's stack: each
// write is stamped exactly once, the stamp lies within the write (by the
// engine's clock, give or take the 1 µs the clocks' offset may be off) and
// the writer's lead, which follows those costs, is positive: a write takes
// time. A device without the program (the emulator before the stamps)
// has no stamps and no lead.
func TestDepartureStamps(t *testing.T) {
	testenv.RequireRoot(t)
	ns := testenv.Netns(t, testenv.UniqueName("stt-emudep-"))
	testenv.Run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	var drains sync.WaitGroup
	d, err := createTUN(ns, "eb", DefaultMTU, &drains)
	if err != nil {
		t.Fatalf("create eb: %v", err)
	}
	t.Cleanup(func() {
		d.Close()
		drains.Wait()
	})
	testenv.Run(t, "ip", "-n", ns, "addr", "add", "10.7.0.1/31", "dev", "eb")
	testenv.Run(t, "ip", "-n", ns, "link", "set", "eb", "up")
	dep := departuresOf(d)
	if dep == nil {
		t.Fatal("the device has no departure stamps: the tcx program was not attached")
	}

	now := monotonic()
	p := testPump(t, discard{}, d, emulation.Params{}, now)
	p.dep, p.depOff = dep, monoOffset(now)
	w := newWriter(d.BatchSize())
	rng := rand.New(rand.NewPCG(5, 5))
	const slack = int64(time.Microsecond)
	const n = 50
	for i := range n {
		pkt := makePacket(uint64(i), 64, rng)
		b := make([]byte, p.bufSize)
		copy(b[Headroom:], pkt)
		w.due = append(w.due[:0], entry{buf: b, n: len(pkt)})
		c0 := dep.count()
		start := now()
		if err := p.deliver(w); err != nil {
			t.Fatal(err)
		}
		end := now()
		if c1 := dep.count(); c1 != c0+1 {
			t.Fatalf("write %d: %d stamps, want 1", i, c1-c0)
		}
		if at := dep.at(c0) + p.depOff; at < start-slack || at > end+slack {
			t.Errorf("write %d: entered the stack at %v, outside the write [%v, %v]", i, time.Duration(at), time.Duration(start), time.Duration(end))
		}
	}
	if s := p.c.snapshot(); s.PacketsOut != n || s.WriteErrors != 0 {
		t.Fatalf("wrote %d packets, %d write errors; want %d, 0", s.PacketsOut, s.WriteErrors, n)
	}
	if lead := p.lead.get(); lead <= 0 || lead > maxLead {
		t.Errorf("lead after %d stamped writes %v, want within (0, %v]", n, time.Duration(lead), time.Duration(maxLead))
	}
	t.Logf("lead after %d writes: %v", n, time.Duration(p.lead.get()))
}

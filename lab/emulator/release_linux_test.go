package emulator

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/strait-net/strait/lab/emulation"
)

const us = int64(time.Microsecond)

// TestWriteLeadFollowsCost: writes that take 12 µs to bring a packet into
// the receiving stack make the writer hand packets over 12 µs early, from
// the first sample on; a host that becomes slower raises the lead within
// tens of samples, and one that becomes quicker lowers it at once (the
// floor), so packets are never more than earlySlack early for long.
func TestWriteLeadFollowsCost(t *testing.T) {
	var w writeLead
	if w.get() != 0 {
		t.Fatalf("lead before any write %d ns, want 0", w.get())
	}
	w.observe(12 * us)
	if w.get() != 12*us {
		t.Fatalf("lead after one 12 µs write %v, want 12µs", time.Duration(w.get()))
	}
	for range 100 {
		w.observe(12 * us)
	}
	if w.get() != 12*us {
		t.Fatalf("lead after 12 µs writes %v, want 12µs", time.Duration(w.get()))
	}
	for range 100 {
		w.observe(20 * us)
	}
	// The median settles within its least step (0.5 µs) of the cost.
	if got := w.get(); got < 19*us || got > 21*us {
		t.Fatalf("lead after 100 writes of 20 µs %v, want 19–21µs", time.Duration(got))
	}
	w.observe(6 * us)
	if got := w.get(); got > 6*us+earlySlack {
		t.Fatalf("lead after a 6 µs write %v, more than it + %v", time.Duration(got), time.Duration(earlySlack))
	}
}

// TestWriteLeadClamps: the lead never exceeds the floor of recent costs by
// more than earlySlack (a packet whose write is as quick as the quickest
// enters the stack at most that early), never exceeds maxLead, is never
// negative, and a stall moves it by at most 8 µs.
func TestWriteLeadClamps(t *testing.T) {
	var w writeLead
	for i := range 200 {
		// Half the writes 5 µs, half 30: the median lies between, the
		// floor at 5.
		w.observe([]int64{5 * us, 30 * us}[i%2])
		if got := w.get(); got > 5*us+earlySlack+floorRise {
			t.Fatalf("write %d: lead %v above the quick writes' %v + %v", i, time.Duration(got), 5*time.Microsecond, time.Duration(earlySlack))
		}
	}
	before := w.get()
	w.observe(int64(5 * time.Millisecond))
	if got := w.get(); got-before > maxMedianStep {
		t.Fatalf("a 5 ms stall moved the lead from %v to %v", time.Duration(before), time.Duration(got))
	}
	var slow writeLead
	for range 1000 {
		slow.observe(200 * us)
	}
	if got := slow.get(); got != maxLead {
		t.Fatalf("lead after 200 µs writes %v, want the cap %v", time.Duration(got), time.Duration(maxLead))
	}
	var neg writeLead
	for range 10 {
		neg.observe(-3 * us) // clocks read on different CPUs
	}
	if got := neg.get(); got != 0 {
		t.Fatalf("lead after negative costs %v, want 0", time.Duration(got))
	}
}

// TestPlanWait: the writer polls while more than 2 ms remain, nanosleeps
// until its usual lateness plus spinWindow before the release, spins only
// the rest, and never waits (nor spins) for a packet already due.
func TestPlanWait(t *testing.T) {
	for _, c := range []struct {
		d, late int64
		reorder bool
		how     waitKind
		v       int64
	}{
		{0, 60 * us, false, waitNone, 0},
		{-5 * us, 60 * us, false, waitNone, 0},
		{5 * int64(time.Millisecond), 60 * us, false, waitPoll, 4},
		{1000 * us, 60 * us, false, waitNanosleep, 1000*us - spinWindow - 60*us},
		{81 * us, 60 * us, false, waitNanosleep, us},
		{80 * us, 60 * us, false, waitSpin, 80 * us},
		{5 * us, 0, false, waitSpin, 5 * us},
		{5 * int64(time.Millisecond), 60 * us, true, waitNanosleep, 100*us - spinWindow - 60*us},
	} {
		how, v := planWait(c.d, c.late, c.reorder)
		if how != c.how || v != c.v {
			t.Errorf("planWait(%v, late %v, reorder %v) = %d, %d; want %d, %d", time.Duration(c.d), time.Duration(c.late), c.reorder, how, v, c.how, c.v)
		}
	}
}

// TestUntilDueLead: the writer hands the head of the queue over its lead
// before its release (by the injected clock), and at its release when it
// has no lead (a device without departure stamps).
func TestUntilDueLead(t *testing.T) {
	var now int64
	p := testPump(t, discard{}, discard{}, emulation.Params{Delay: 500 * time.Microsecond}, func() int64 { return now })
	bufs, sizes := [][]byte{make([]byte, p.bufSize)}, []int{64}
	p.enqueue(1000*us, bufs, sizes, nil) // released at 1500 µs
	now = 1400 * us
	if got := p.untilDue(now); got != 100*us {
		t.Fatalf("no lead: due in %v, want 100µs", time.Duration(got))
	}
	for range 50 {
		p.lead.observe(15 * us)
	}
	if got := p.untilDue(now); got != 85*us {
		t.Fatalf("lead 15 µs: due in %v, want 85µs", time.Duration(got))
	}
	now = 1490 * us
	if got := p.untilDue(now); got > 0 {
		t.Fatalf("lead 15 µs, 10 µs before the release: due in %v, want it due", time.Duration(got))
	}
}

// TestLookAhead: the writer takes with the head only packets that wait for
// the line, each by at most what it waited and at most releaseAhead. Two
// probes released 80 µs apart on a link without a rate leave each at its
// own release (the second left with the first before, below the link's
// least delay); a burst through a 1 Gbit/s link leaves in one batch up to
// the packet that waited more than releaseAhead.
func TestLookAhead(t *testing.T) {
	newTestPump := func(p emulation.Params) *pump {
		return testPump(t, discard{}, &recordDevice{}, p, func() int64 { return 0 })
	}
	taken := func(pm *pump, now int64) []uint64 {
		w := newWriter(128)
		pm.collect(now, w)
		var got []uint64
		for _, e := range w.due {
			got = append(got, binary.BigEndian.Uint64(e.buf[Headroom:]))
		}
		return got
	}

	t.Run("own delay", func(t *testing.T) {
		pm := newTestPump(emulation.Params{Delay: 5 * time.Millisecond})
		for i, at := range []int64{0, 80 * us} {
			bufs, sizes := readBatch(pm, uint64(i), 1, 100)
			pm.enqueue(at, bufs, sizes, nil)
		}
		if got := taken(pm, 5000*us); !slices.Equal(got, []uint64{0}) {
			t.Fatalf("at the first release the writer took %v, want [0]", got)
		}
		if got := taken(pm, 5079*us); len(got) != 0 {
			t.Fatalf("1 µs before the second release the writer took %v", got)
		}
		if got := taken(pm, 5080*us); !slices.Equal(got, []uint64{1}) {
			t.Fatalf("at the second release the writer took %v, want [1]", got)
		}
	})

	t.Run("waiting for the line", func(t *testing.T) {
		// Ten 1500-byte packets at once: released 12 µs apart from
		// 5.012 ms, packet i held 12·i µs behind the serializer.
		pm := newTestPump(emulation.Params{Delay: 5 * time.Millisecond, Rate: 1e9})
		bufs, sizes := readBatch(pm, 0, 10, 1500)
		pm.enqueue(0, bufs, sizes, nil)
		if got := taken(pm, 5012*us); !slices.Equal(got, []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8}) {
			t.Fatalf("at the head's release the writer took %v, want packets 0-8 (9 waited 108 µs)", got)
		}
		if got := taken(pm, 5019*us); len(got) != 0 {
			t.Fatalf("before packet 9 may leave the writer took %v", got)
		}
		if got := taken(pm, 5020*us); !slices.Equal(got, []uint64{9}) {
			t.Fatalf("100 µs before its release the writer took %v, want [9]", got)
		}
	})
}

// costlyDevice records what is written and takes cost ns of the test's
// clock per Write.
type costlyDevice struct {
	recordDevice
	now  *int64
	cost int64
}

func (d *costlyDevice) Write(b [][]byte, off int) (int, error) {
	*d.now += d.cost
	return d.recordDevice.Write(b, off)
}

// TestWriteTime: the counters add up the time spent in Write, by the
// pump's clock: two writes of 7 µs each are 14 µs.
func TestWriteTime(t *testing.T) {
	var now int64
	dst := &costlyDevice{now: &now, cost: 7 * us}
	pm := testPump(t, discard{}, dst, emulation.Params{}, func() int64 { return now })
	w := newWriter(dst.BatchSize())
	for i := range 2 {
		bufs, sizes := readBatch(pm, uint64(i), 3, 100)
		pm.enqueue(now, bufs, sizes, nil)
		pm.collect(now, w)
		if err := pm.deliver(w); err != nil {
			t.Fatal(err)
		}
	}
	if s := pm.c.snapshot(); s.Batches != 2 || s.PacketsOut != 6 || s.WriteTime != uint64(14*us) {
		t.Fatalf("counters %+v: want 2 batches, 6 packets, 14 µs of writes", s)
	}
}

package emulator

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/lab/emulation"
)

// recordDevice keeps the index (the first 8 bytes after Headroom) of every
// packet written into it, in order.
type recordDevice struct{ got []uint64 }

func (d *recordDevice) Read([][]byte, []int, int) (int, error) { select {} }
func (d *recordDevice) Write(b [][]byte, off int) (int, error) {
	for _, p := range b {
		d.got = append(d.got, binary.BigEndian.Uint64(p[off:]))
	}
	return len(b), nil
}
func (d *recordDevice) BatchSize() int { return 128 }
func (d *recordDevice) Close() error   { return nil }

// testPump is a pump from src to dst through a link with params p (shaper
// seeds 1, 2), on clock now, closed when the test ends.
func testPump(tb testing.TB, src, dst Device, p emulation.Params, now clock) *pump {
	tb.Helper()
	pm, err := newPump(src, dst, newShaper(p, 1, 2), DefaultMTU, now)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pm.close)
	return pm
}

// readBatch is what the reader hands enqueue: n packets of size bytes,
// numbered from first.
func readBatch(p *pump, first uint64, n, size int) ([][]byte, []int) {
	bufs, sizes := make([][]byte, n), make([]int, n)
	for i := range bufs {
		bufs[i] = make([]byte, p.bufSize)
		binary.BigEndian.PutUint64(bufs[i][Headroom:], first+uint64(i))
		sizes[i] = size
	}
	return bufs, sizes
}

// woken reports whether the writer's eventfd was signalled, and resets it.
func woken(p *pump) bool {
	fds := []unix.PollFd{{Fd: int32(p.wake), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, 0); n == 0 {
		return false
	}
	var b [8]byte
	_, _ = unix.Read(p.wake, b[:])
	return true
}

// TestReaderWritesDuePackets: a packet that is due when the reader has it
// (no delay, or a delay within the writer's lead) and finds nothing queued
// or being written is written by the reader at once, without waking the
// writer; one that is not due yet is queued and the idle writer's timer
// armed for it (or the writer woken, when it is due within the spin); one
// that finds packets before it is queued, and the writer then waits for
// the reader's Write and is woken after it. Clock and arrivals are
// injected.
func TestReaderWritesDuePackets(t *testing.T) {
	var now int64
	clk := func() int64 { return now }
	newTestPump := func(p emulation.Params) (*pump, *recordDevice, *writer) {
		dst := &recordDevice{}
		pm := testPump(t, discard{}, dst, p, clk)
		pm.waiting = true // the writer sleeps in await
		return pm, dst, newWriter(dst.BatchSize())
	}

	t.Run("no delay", func(t *testing.T) {
		pm, dst, direct := newTestPump(emulation.Params{})
		now = 1000 * us
		bufs, sizes := readBatch(pm, 0, 3, 100)
		if !pm.enqueue(980*us, bufs, sizes, direct) {
			t.Fatal("due packets with nothing queued: not written by the reader")
		}
		if pm.q.len() != 0 || !pm.writing || woken(pm) {
			t.Fatalf("queued %d, writing %v, writer woken: want 0, true, no", pm.q.len(), pm.writing)
		}
		if err := pm.deliver(direct); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(dst.got, []uint64{0, 1, 2}) || pm.writing {
			t.Fatalf("wrote %v, writing %v; want [0 1 2], false", dst.got, pm.writing)
		}
		if s := pm.c.snapshot(); s.Direct != 3 || s.PacketsOut != 3 || s.OnTime != 0 || s.Late != 3 {
			// Written 20 µs after they arrived, with no lead: late.
			t.Fatalf("stats %+v: want 3 direct, 3 out, 3 late", s)
		}
	})

	t.Run("delay within the lead", func(t *testing.T) {
		pm, _, direct := newTestPump(emulation.Params{Delay: 10 * time.Microsecond})
		for range 50 {
			pm.lead.observe(15 * us)
		}
		now = 1000 * us
		bufs, sizes := readBatch(pm, 0, 1, 100)
		if !pm.enqueue(996*us, bufs, sizes, direct) {
			t.Fatal("a packet released 6 µs after now with a 15 µs lead: not written by the reader")
		}
	})

	t.Run("not due", func(t *testing.T) {
		// Due in 490 µs: the reader arms the idle writer's timer for
		// when its sleep would end (see armTimer) instead of waking it.
		pm, _, direct := newTestPump(emulation.Params{Delay: 500 * time.Microsecond})
		now = 1000 * us
		bufs, sizes := readBatch(pm, 0, 1, 100)
		if pm.enqueue(990*us, bufs, sizes, direct) {
			t.Fatal("a packet due in 490 µs was written by the reader")
		}
		if pm.q.len() != 1 || pm.writing || woken(pm) {
			t.Fatalf("queued %d, writing %v, writer woken: want 1, false, no", pm.q.len(), pm.writing)
		}
		if want := 1490*us - spinWindow; !pm.armed || pm.armedAt != want {
			t.Fatalf("timer armed %v for %v, want for %v", pm.armed, time.Duration(pm.armedAt), time.Duration(want))
		}
		// A later packet finds the writer waiting for its timer: it
		// neither wakes it nor moves the timer.
		later, lsizes := readBatch(pm, 1, 1, 100)
		now = 1100 * us
		pm.enqueue(1100*us, later, lsizes, direct)
		if woken(pm) || pm.armedAt != 1490*us-spinWindow {
			t.Fatalf("a later packet woke the writer or moved its timer to %v", time.Duration(pm.armedAt))
		}
	})

	t.Run("due within the spin", func(t *testing.T) {
		// Due in 15 µs, less than the spin window: the writer is woken
		// at once, as before the timer.
		pm, _, direct := newTestPump(emulation.Params{Delay: 25 * time.Microsecond})
		now = 1000 * us
		bufs, sizes := readBatch(pm, 0, 1, 100)
		if pm.enqueue(990*us, bufs, sizes, direct) {
			t.Fatal("a packet due in 15 µs was written by the reader")
		}
		if pm.armed || !woken(pm) {
			t.Fatalf("timer armed %v, writer woken false: want it woken", pm.armed)
		}
	})

	t.Run("behind a queued packet", func(t *testing.T) {
		// A rate of 8 Mbit/s: 100 bytes take 100 µs on the wire, so of
		// a batch of three the first is due, the next two are not; a
		// later batch finds them queued and waits behind them even
		// when it is due itself.
		pm, dst, direct := newTestPump(emulation.Params{Rate: 8e6})
		now = 1000 * us
		bufs, sizes := readBatch(pm, 0, 3, 100)
		if !pm.enqueue(900*us, bufs, sizes, direct) {
			t.Fatal("the batch's due first packet was not written by the reader")
		}
		if len(direct.due) != 1 || pm.q.len() != 2 {
			t.Fatalf("reader writes %d, queued %d: want 1, 2", len(direct.due), pm.q.len())
		}
		// The writer must wait for the reader's Write: it is woken
		// after it, not before.
		now = 1600 * us
		later, lsizes := readBatch(pm, 3, 1, 100)
		if pm.enqueue(1500*us, later, lsizes, newWriter(128)) {
			t.Fatal("a due packet read while others wait and one is written went direct")
		}
		if woken(pm) {
			t.Fatal("writer woken while the reader writes")
		}
		if err := pm.deliver(direct); err != nil {
			t.Fatal(err)
		}
		if !woken(pm) {
			t.Fatal("the reader's Write ended with packets queued and the writer not woken")
		}
		pm.mu.Lock()
		w := newWriter(128)
		pm.writing = true
		pm.collect(now, w)
		pm.mu.Unlock()
		if err := pm.deliver(w); err != nil {
			t.Fatal(err)
		}
		if want := []uint64{0, 1, 2, 3}; !slices.Equal(dst.got, want) {
			t.Fatalf("wrote %v, want %v", dst.got, want)
		}
	})

	t.Run("writer busy", func(t *testing.T) {
		pm, _, direct := newTestPump(emulation.Params{})
		pm.writing = true // the writer collected packets and writes them
		now = 1000 * us
		bufs, sizes := readBatch(pm, 0, 1, 100)
		if pm.enqueue(990*us, bufs, sizes, direct) {
			t.Fatal("the reader wrote while the writer was writing")
		}
		if pm.q.len() != 1 {
			t.Fatalf("queued %d, want 1", pm.q.len())
		}
	})
}

// TestArmTimer: the reader arms the writer's timer where the writer would
// end its sleep before the release (its usual lateness plus spinWindow
// ahead), and wakes it at once when it would spin anyway.
func TestArmTimer(t *testing.T) {
	for _, c := range []struct {
		now, d, late int64
		at           int64
		ok           bool
	}{
		{1000 * us, 500 * us, 30 * us, 1000*us + 500*us - spinWindow - 30*us, true},
		{0, 10 * int64(time.Millisecond), 0, 10*int64(time.Millisecond) - spinWindow, true},
		{1000 * us, spinWindow + 30*us, 30 * us, 0, false},
		{1000 * us, 5 * us, 0, 0, false},
		{1000 * us, -5 * us, 0, 0, false},
	} {
		at, ok := armTimer(c.now, c.d, c.late)
		if at != c.at || ok != c.ok {
			t.Errorf("armTimer(%v, %v, late %v) = %v, %v; want %v, %v", time.Duration(c.now), time.Duration(c.d), time.Duration(c.late), time.Duration(at), ok, time.Duration(c.at), c.ok)
		}
	}
}

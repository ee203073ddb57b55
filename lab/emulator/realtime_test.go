package emulator

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/emulation"
)

// TestReaderBoostsArmedWriter: when the reader arms the idle writer's
// timer for a packet, it puts the writer's thread under SCHED_FIFO (see
// setRealtime); a later packet, while the writer waits for that timer,
// does not do it again; the writer's way back is the normal policy at the
// pumps' nice value; and a pump whose realtime is off never boosts. A
// locked thread of the test stands for the writer (Go discards it when
// its goroutine ends, policy and all); clock and arrivals are injected.
func TestReaderBoostsArmedWriter(t *testing.T) {
	testenv.RequireRoot(t)
	tids := make(chan int)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		tids <- unix.Gettid()
		<-done
	}()
	tid := <-tids
	defer close(done)
	attr := func() *unix.SchedAttr {
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	var now int64
	clk := func() int64 { return now }
	newArmed := func(realtime bool) *pump {
		pm, err := newPump(discard{}, &recordDevice{}, newShaper(emulation.Params{Delay: 500 * time.Microsecond}, 1, 2), DefaultMTU, clk)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pm.close)
		pm.waiting, pm.writerTID, pm.realtime = true, tid, realtime
		now = 1000 * us
		bufs, sizes := readBatch(pm, 0, 1, 100)
		pm.enqueue(990*us, bufs, sizes, newWriter(128))
		if !pm.armed {
			t.Fatal("a packet due in 490 µs did not arm the idle writer's timer")
		}
		return pm
	}

	pm := newArmed(true)
	if a := attr(); !pm.boosted || a.Policy != unix.SCHED_FIFO || a.Priority != rtPriority {
		t.Fatalf("armed: boosted %v, writer policy %d priority %d; want true, SCHED_FIFO %d", pm.boosted, a.Policy, a.Priority, rtPriority)
	}
	if !setRealtime(tid, false) {
		t.Fatal("setRealtime(false) failed")
	}
	bufs, sizes := readBatch(pm, 1, 1, 100)
	now = 1100 * us
	pm.enqueue(1100*us, bufs, sizes, newWriter(128))
	if a := attr(); a.Policy != unix.SCHED_NORMAL || a.Nice != priority {
		t.Fatalf("a later packet, the writer waiting for its timer: policy %d nice %d; want the writer left alone (SCHED_NORMAL, nice %d)", a.Policy, a.Nice, priority)
	}

	pm = newArmed(false)
	if a := attr(); pm.boosted || a.Policy != unix.SCHED_NORMAL {
		t.Fatalf("realtime off: boosted %v, writer policy %d; want false, SCHED_NORMAL", pm.boosted, a.Policy)
	}
}

package emulator

import (
	"sync/atomic"
	"time"
)

// writeLead follows how long the writer's Write of one packet takes from
// its start until the packet enters the receiving namespace's stack (the
// departure stamp), and says how far ahead of its release the writer hands
// a packet to Write, so that the packet enters the stack at its release,
// as it would leave a netem qdisc. On this kind of VM that way takes 10–25
// µs, by the load: without the lead every packet arrived that much late
// (see docs/topology.md, "Accuracy").
//
// The lead is the running median of the costs, but never more than
// earlySlack above their running floor, nor more than maxLead: a packet
// whose Write is as quick as the quickest recent ones enters the stack at
// most earlySlack early, and a host whose writes slow down by a stall or
// load raises the lead slowly (the median moves at most 8 µs a sample)
// while the floor holds it down. Before the first sample, and on devices
// without departure stamps, the lead is 0: packets are handed over at
// their release, as before.
type writeLead struct {
	med   runningMedian
	floor int64 // the least recent cost; it rises by floorRise per sample
	seen  bool
	v     atomic.Int64 // the lead, for readers other than the writer
}

const (
	// maxLead bounds the lead: a write slower than that is the host
	// stalling, not the device's cost.
	maxLead = int64(50 * time.Microsecond)
	// earlySlack is how much earlier than its release a packet may enter
	// the stack when its Write is as quick as the floor.
	earlySlack = int64(3 * time.Microsecond)
	// floorRise lets the floor follow a host that became slower: 40
	// samples raise it by 10 µs.
	floorRise = int64(250 * time.Nanosecond)
)

// observe takes the cost of one Write (whoever holds p.writing: the writer, or the reader writing due packets).
func (w *writeLead) observe(cost int64) {
	cost = max(cost, 0)
	switch {
	case !w.seen:
		w.floor = cost
		w.med.v.Store(min(cost, maxLead))
		w.seen = true
	case cost < w.floor:
		w.floor = cost
	default:
		w.floor = min(w.floor+floorRise, cost)
	}
	w.med.observe(cost)
	w.v.Store(min(max(min(w.med.get(), w.floor+earlySlack), 0), maxLead))
}

// get is the current lead in ns.
func (w *writeLead) get() int64 { return w.v.Load() }

// waitKind is what the writer does before its next release.
type waitKind uint8

const (
	waitNone      waitKind = iota // the head is due: write now
	waitPoll                      // block in poll(2) for d ms
	waitNanosleep                 // nanosleep for d ns
	waitSpin                      // spin on the clock for d ns
)

// planWait decides how the writer waits for a release d ns away, given its
// usual nanosleep lateness: poll while more than 2 ms remain (it frees the
// thread's P), nanosleep until its usual lateness plus spinWindow before
// the release, and spin the rest. With reordering a later arrival may be
// due earlier than the current head, so the writer looks again at least
// every 100 µs. A head that is due is written at once: the writer never
// spins for packets already due, so a stream's batches cost what they
// did before the spin.
func planWait(d, sleepLate int64, reorder bool) (waitKind, int64) {
	const ms = int64(time.Millisecond)
	if d <= 0 {
		return waitNone, 0
	}
	if reorder {
		d = min(d, 100*int64(time.Microsecond))
	}
	if d > 2*ms {
		return waitPoll, (d - ms) / ms
	}
	if s := d - spinWindow - sleepLate; s > 0 {
		return waitNanosleep, s
	}
	return waitSpin, d
}

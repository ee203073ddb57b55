package emulator

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Stats counts what one direction of a link did.
type Stats struct {
	PacketsIn, BytesIn   uint64 // read from the sending side
	PacketsOut, BytesOut uint64 // written to the receiving side
	DroppedLoss          uint64 // dropped by random loss
	DroppedLimit         uint64 // dropped because the queue held Limit packets
	ReadErrors           uint64 // failed reads (e.g. an offload packet with too many segments)
	WriteErrors          uint64 // batches the receiving device refused (e.g. link down)
	Batches              uint64 // Write calls: PacketsOut/Batches is the mean batch
	// WriteTime is the time spent in those calls, in ns. A Write runs the
	// receiving side's stack up to the socket (and, on clusters, the
	// bridge, netfilter and forwarding on the way), and packets due
	// meanwhile wait: WriteTime/Batches beside Late shows how much of the
	// lateness is the writes' own cost.
	WriteTime uint64
	// OnTime counts the packets handed to Write at most OnTimeSlack after
	// their release time less the writer's lead (see writeLead), Late the
	// others: a busy host's stalls show here (see docs/topology.md,
	// "Accuracy").
	OnTime, Late uint64
	// Direct counts the packets the reader wrote itself because they were
	// due when it read them and nothing waited before them (see enqueue).
	Direct uint64
	// Unstamped counts the reads from a TUN device dated by when the
	// reader got to them, because the stamping filter could not be
	// attached (see arrivals): their delay starts up to the reader's
	// wake-up late.
	Unstamped uint64
}

// OnTimeSlack is how late after its release a packet still counts as on
// time.
const OnTimeSlack = 10 * time.Microsecond

type counters struct {
	packetsIn, bytesIn, packetsOut, bytesOut atomic.Uint64
	droppedLoss, droppedLimit                atomic.Uint64
	readErrors, writeErrors, batches         atomic.Uint64
	writeTime                                atomic.Uint64
	onTime, late                             atomic.Uint64
	direct, unstamped                        atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		PacketsIn: c.packetsIn.Load(), BytesIn: c.bytesIn.Load(),
		PacketsOut: c.packetsOut.Load(), BytesOut: c.bytesOut.Load(),
		DroppedLoss: c.droppedLoss.Load(), DroppedLimit: c.droppedLimit.Load(),
		ReadErrors: c.readErrors.Load(), WriteErrors: c.writeErrors.Load(),
		Batches: c.batches.Load(), WriteTime: c.writeTime.Load(), OnTime: c.onTime.Load(), Late: c.late.Load(),
		Direct: c.direct.Load(), Unstamped: c.unstamped.Load(),
	}
}

// maxPacket bounds what Write may coalesce into one buffer: an IP packet
// is at most 64 KiB.
const maxPacket = 65535

// clock is the engine's time in nanoseconds, monotonic.
type clock func() int64

func monotonic() clock {
	epoch := time.Now()
	return func() int64 { return int64(time.Since(epoch)) }
}

// pump carries one direction of a link: a reader goroutine that timestamps,
// drops or enqueues what src delivers (and writes to dst itself what is
// due already, see enqueue), and a writer on a locked OS thread that sleeps
// precisely until the head of the queue is due and writes every due packet
// to dst in one batch.
type pump struct {
	src, dst Device
	bufSize  int
	sh       *shaper
	now      clock
	c        counters

	mu   sync.Mutex
	wake int // eventfd the reader and stop use to wake the writer
	// timer is a timerfd the reader arms, instead of waking the idle
	// writer at once, for a packet whose release is far (see armTimer):
	// the writer then wakes once, near the release, rather than also at
	// the packet's arrival, when the sender and the reader run too.
	// armed (under mu) says the writer waits for it, armedAt for when
	// (the engine's clock); monoOff is the engine's clock minus
	// CLOCK_MONOTONIC, the timer's clock.
	timer   int
	armed   bool
	armedAt int64
	monoOff int64
	q       queue
	free    [][]byte // packet buffers not in use, to avoid garbage per packet
	waiting bool     // the writer waits on wake (and timer, if armed)
	stopped bool

	// sleepLate is how much later than asked the writer's nanosleep
	// returns (writer goroutine only; see sleep).
	sleepLate runningMedian
	// lead is how far ahead of its release the writer hands a packet to
	// dst (see writeLead); dep dates the packets' entry into dst's
	// namespace (nil: no stamps, no lead), depOff is the engine's clock
	// minus the stamps'.
	lead   writeLead
	dep    *departures
	depOff int64

	// writing says that a Write into dst is under way or about to be,
	// by the writer or by the reader (see enqueue): Write is called by
	// one goroutine at a time, and packets leave in queue order.
	writing bool
	// trace, if set before run, sees every packet written (tests only).
	trace func(pkt []byte, t traced)
	// armCPU is the CPU the reader armed the timer on (under mu; traces
	// only): the timer fires there.
	armCPU int32
}

// traced is what the engine knows of a packet it wrote, by its clock:
// when the kernel queued it on the source device, its release, the lead
// it was handed over with, when its Write started, when it entered the
// receiving stack (0: not stamped) and when the Write returned; and how
// the thread that wrote it last woke before (by), when (woke) and when it
// meant to (aimed), so a late packet can be traced to a late wake-up.
type traced struct {
	arrival, release, lead, start, entered, end int64
	woke, aimed                                 int64
	by                                          wakeKind
	// The CPU the reader armed the timer on and the one the writer woke
	// on (traces only; -1: not known): a timer that wakes a thread on
	// another, halted, CPU needs a second wake-up of a virtual CPU.
	armCPU, wakeCPU int32
}

// wakeKind is how the thread that wrote a packet last woke before it.
type wakeKind uint8

const (
	wakeDirect    wakeKind = iota // the reader wrote it (see enqueue)
	wakeSignal                    // the writer, woken by the reader's eventfd
	wakeTimer                     // the writer, by the timer the reader armed
	wakeNanosleep                 // the writer, from its nanosleep
	wakePoll                      // the writer, from a poll(2) timeout
	wakeBusy                      // the writer went on from its previous Write
)

// runningMedian follows the typical value of a stream of latencies: it
// moves toward each sample by an eighth of the gap, by at least 0.5 µs and
// at most 8 µs. It settles where samples above and below pull equally, near
// the median; it follows a host whose load changes within tens of samples;
// and a stall of milliseconds moves it no more than 8 µs. It stays within
// [0, maxSleepLate], so that a starved host cannot make the writer wake
// (and spin) more than that early.
type runningMedian struct{ v atomic.Int64 } // written by whoever holds p.writing, one at a time

const (
	minMedianStep = int64(500 * time.Nanosecond)
	maxMedianStep = int64(8 * time.Microsecond)
	maxSleepLate  = int64(200 * time.Microsecond)
)

func (m *runningMedian) observe(x int64) {
	v := m.v.Load()
	step := min(max((x-v)/8, minMedianStep), maxMedianStep)
	if x < v {
		step = -min(max((v-x)/8, minMedianStep), maxMedianStep)
	} else if x == v {
		return
	}
	m.v.Store(min(max(v+step, 0), maxSleepLate))
}

func (m *runningMedian) get() int64 { return m.v.Load() }

func newPump(src, dst Device, sh *shaper, mtu int, now clock) (*pump, error) {
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	timer, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		unix.Close(wake)
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	p := &pump{src: src, dst: dst, sh: sh, now: now, bufSize: Headroom + mtu, wake: wake, timer: timer, monoOff: monoOffset(now)}
	p.q.heap = sh.reorder
	return p, nil
}

// close releases the pump's descriptors; run does it when it returns.
func (p *pump) close() {
	unix.Close(p.wake)
	unix.Close(p.timer)
}

// run forwards until stop is called and src is closed. Both the reader
// and the writer may write into dst (see enqueue), so both share the
// departure stamps, held until both have returned.
func (p *pump) run() {
	if dep := departuresOf(p.dst); dep != nil && dep.acquire() {
		p.dep, p.depOff = dep, monoOffset(p.now)
		defer dep.release()
	}
	var wg sync.WaitGroup
	wg.Go(p.readLoop)
	wg.Go(p.writeLoop)
	wg.Wait()
	p.close()
}

// stop makes the writer return; the caller closes the devices so that the
// reader returns too. Packets still queued are discarded.
func (p *pump) stop() {
	p.mu.Lock()
	p.stopped = true
	p.signal()
	p.mu.Unlock()
}

func (p *pump) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

func (p *pump) getBuf() []byte {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	return make([]byte, p.bufSize)
}

// priority is the nice value of the pumps' threads. The emulator stands
// for the network: workloads under test share the CPUs with it and must not
// be able to delay its packets. Raising priority needs CAP_SYS_NICE; without
// it the threads keep the default.
const priority = -10

// lockThread pins the calling goroutine to its OS thread for good and
// raises that thread's priority (nice values are per thread on Linux). The
// goroutine never unlocks: when it returns, Go ends the thread rather than
// hand a thread with changed priority and timer slack to other goroutines.
func lockThread() {
	runtime.LockOSThread()
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), priority)
}

func (p *pump) readLoop() {
	// The reader timestamps arrivals and empties the device's queue, so it
	// gets a raised-priority thread of its own too.
	lockThread()
	wait, date, done := p.readWaiter()
	defer done()
	bs := p.src.BatchSize()
	direct := newWriter(p.dst.BatchSize())
	bufs := make([][]byte, bs)
	sizes := make([]int, bs)
	for i := range bufs {
		bufs[i] = make([]byte, p.bufSize)
	}
	failures := 0
	for {
		if !wait() {
			return
		}
		n, err := p.src.Read(bufs, sizes, Headroom)
		if n > 0 && p.enqueue(date(bufs[0][Headroom:Headroom+sizes[0]]), bufs[:n], sizes[:n], direct) {
			// dst closed: the reader goes on until src is.
			_ = p.deliver(direct)
		}
		if err == nil {
			failures = 0
			continue
		}
		if errClosed(err) || p.isStopped() {
			// Closing a TUN device can surface as another error first
			// (its netlink listener's), which is not a failed read.
			return
		}
		p.c.readErrors.Add(1)
		if failures++; failures > 100 {
			// A device that fails every read must not spin a core.
			time.Sleep(time.Millisecond)
		}
	}
}

// readWaiter returns a function that blocks until src has a packet to
// read, on the calling thread, and reports false once src is closed, and a
// function that dates the packets Read then returned (first is the first
// of them) by the engine's clock. For a device with a file descriptor (a TUN
// device) wait waits in poll(2): readiness reported through Go's netpoller
// reaches the reader only after some thread of normal priority has noticed
// it, and on a busy machine that lag overflowed the device's queue (500
// packets) and lost packets the emulator never saw. Other devices block in
// Read as usual, and their packets arrive when Read returns. done releases
// what wait holds.
//
// The arrival is the kernel's stamp (see arrivals). Without one (the
// filter could not be attached) it is when poll returned, which is late
// by the reader's wake-up.
func (p *pump) readWaiter() (wait func() bool, date func(first []byte) int64, done func()) {
	plainWait := func() bool { return true }
	plainDate := func([]byte) int64 { return p.now() }
	f, ok := p.src.(interface{ File() *os.File })
	if !ok {
		return plainWait, plainDate, func() {}
	}
	rc, err := f.File().SyscallConn()
	if err != nil {
		return plainWait, plainDate, func() {}
	}
	var fd int
	if rc.Control(func(v uintptr) { fd = int(v) }) != nil {
		return plainWait, plainDate, func() {}
	}
	hdr := 0
	if h, ok := p.src.(interface{ linkHeader() int }); ok {
		hdr = h.linkHeader()
	}
	arr, err := attachArrivals(fd, p.now, hdr)
	if err != nil {
		arr = nil
	}
	done = func() {
		if arr != nil {
			arr.close()
		}
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	// last is the previous packet's arrival, lo the earliest the next
	// one can have arrived, woke when poll said it is there.
	var last, lo, woke int64
	wait = func() bool {
		for {
			// A packet read right after the previous one arrived after
			// it (the queue is FIFO); one read after the queue was found
			// empty arrived after that.
			lo = last
			n, err := unix.Poll(fds, 0)
			if err == nil && n == 0 {
				var count uint64
				if arr != nil {
					count = arr.count()
				}
				lo = p.now()
				// The timeout bounds how long a closed device goes
				// unnoticed.
				n, err = unix.Poll(fds, 100)
				if arr != nil {
					arr.resync(count)
				}
			}
			if err == nil && n > 0 {
				// Readable, or POLLNVAL/POLLHUP after close: Read tells.
				woke = p.now()
				return true
			}
			if err != nil && err != unix.EINTR {
				woke = p.now()
				return true
			}
			if rc.Control(func(uintptr) {}) != nil {
				return false // closed
			}
		}
	}
	date = func(first []byte) int64 {
		if arr == nil {
			p.c.unstamped.Add(1)
			last = woke
		} else {
			last = arr.take(lo, woke, fingerprint(first))
		}
		return last
	}
	return wait, date, done
}

// enqueue decides the fate of a batch that arrived at arrival and takes
// ownership of the buffers of the packets it keeps, replacing them in bufs.
//
// With direct, packets due already (their release less the writer's lead
// has passed: a direction without delay, or one whose delay is shorter
// than the reader's wake-up) go into direct.due instead of the queue when
// nothing is queued before them and no Write is under way, and enqueue
// reports true: the caller must deliver them at once. Handing them to the
// idle writer would add a second thread wake-up, as long as a veth hop on
// this kind of VM (see docs/topology.md, "Accuracy"), to a packet that is
// late already. Order holds: later packets queue behind the ones being
// written, and the writer waits for that Write to finish.
func (p *pump) enqueue(arrival int64, bufs [][]byte, sizes []int, direct *writer) bool {
	var bytes uint64
	var lost, limited uint64
	p.mu.Lock()
	// open: the packets may still go direct; it closes for good at the
	// first packet that has to wait.
	open := direct != nil && p.q.len() == 0 && !p.writing
	var now int64
	if direct != nil {
		direct.due = direct.due[:0]
	}
	if open {
		now = p.now()
	}
	held := p.q.len()
	for i, size := range sizes {
		bytes += uint64(size)
		release, wait, v := p.sh.admit(arrival, size, held)
		switch v {
		case dropLoss:
			lost++
			continue
		case dropLimit:
			limited++
			continue
		}
		e := entry{buf: bufs[i], n: size, release: release, ahead: min(wait, releaseAhead), arrival: arrival}
		if open && len(direct.due) < cap(direct.due) && dueOnArrival(release, p.lead.get(), now) {
			direct.due = append(direct.due, e)
		} else {
			open = false
			p.q.push(e)
		}
		held++
		bufs[i] = p.getBuf()
	}
	writeNow := direct != nil && len(direct.due) > 0
	if writeNow {
		p.writing = true
		p.c.direct.Add(uint64(len(direct.due)))
	}
	// While a Write is under way, the one who writes wakes the writer
	// when it is done (see deliver); while the writer waits for its
	// timer, a later packet is not due before the head it was armed for
	// (the queue is FIFO).
	wake := p.waiting && p.q.len() > 0 && !p.writing && !p.armed
	if wake && !p.sh.reorder {
		now := p.now()
		if at, ok := armTimer(now, p.q.peek().release-p.lead.get()-now, p.sleepLate.get()); ok && p.arm(at) {
			wake = false
		}
	}
	p.waiting = p.waiting && !wake
	p.mu.Unlock()
	if wake {
		p.signal()
	}
	p.c.packetsIn.Add(uint64(len(sizes)))
	p.c.bytesIn.Add(bytes)
	if lost > 0 {
		p.c.droppedLoss.Add(lost)
	}
	if limited > 0 {
		p.c.droppedLimit.Add(limited)
	}
	return writeNow
}

// armTimer says when the reader arms the idle writer's timer for a head
// of the queue due in d ns from now, given the writer's usual wake-up
// lateness: where the writer would sleep before that release (see
// planWait), at the moment its sleep would end. ok is false when the
// writer would spin right away: the reader wakes it at once.
func armTimer(now, d, sleepLate int64) (at int64, ok bool) {
	if s := d - spinWindow - sleepLate; s > 0 {
		return now + s, true
	}
	return 0, false
}

// arm sets the writer's timer to the engine's time at and marks the
// writer as waiting for it; it reports false if the timer could not be
// set. The caller holds p.mu.
func (p *pump) arm(at int64) bool {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(at - p.monoOff)}
	if unix.TimerfdSettime(p.timer, unix.TFD_TIMER_ABSTIME, &spec, nil) != nil {
		return false
	}
	p.armed, p.armedAt = true, at
	if p.trace != nil {
		p.armCPU = currentCPU()
	}
	return true
}

// dueOnArrival reports whether a packet released at release is due at
// now, when the writer hands packets over lead ahead of their release.
func dueOnArrival(release, lead, now int64) bool { return release-lead <= now }

func (p *pump) writeLoop() {
	// Go timers round sub-millisecond sleeps up to about 0.8 ms; nanosleep
	// on a thread of our own with 1 ns timer slack overshoots by tens of µs.
	lockThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	p.calibrate()

	w := newWriter(p.dst.BatchSize())
	for {
		p.mu.Lock()
		// While the reader writes due packets itself, the writer waits
		// for it (deliver wakes it), so packets leave in order.
		for (p.q.len() == 0 || p.writing || p.armed) && !p.stopped {
			p.waiting = true
			p.mu.Unlock()
			timer := p.await(-1)
			p.mu.Lock()
			p.waiting = false
			now := p.now()
			w.woke, w.aimed, w.by, w.armCPU, w.wakeCPU = now, now, wakeSignal, -1, -1
			if p.armed && timer {
				// The reader armed the timer for the head: its wake-up
				// is a sleep like nanosleep's, and as late.
				p.armed = false
				p.sleepLate.observe(now - p.armedAt)
				w.aimed, w.by = p.armedAt, wakeTimer
				if p.trace != nil {
					w.armCPU, w.wakeCPU = p.armCPU, currentCPU()
				}
			}
		}
		if p.stopped {
			p.mu.Unlock()
			return
		}
		now := p.now()
		if d := p.untilDue(now); d > 0 {
			p.mu.Unlock()
			p.sleep(d, w)
			continue
		}
		p.writing = true
		p.collect(now+p.lead.get(), w)
		p.mu.Unlock()
		if err := p.deliver(w); err != nil {
			return
		}
		w.woke, w.aimed, w.by, w.armCPU, w.wakeCPU = 0, 0, wakeBusy, -1, -1
	}
}

// untilDue is how long the writer waits, from now, before it hands the
// head of the queue to dst: until its release less the lead (the time its
// Write takes to bring it into the receiving namespace's stack). The
// caller holds p.mu; the queue must not be empty.
func (p *pump) untilDue(now int64) int64 {
	return p.q.peek().release - p.lead.get() - now
}

// writer holds the writer's reusable batch state. Its slots are the
// buffers handed to Write: each needs room for a whole coalesced
// super-packet, so there are few of them, reused and allocated on first
// use, and packets are copied into them rather than queued in them.
type writer struct {
	slots [][]byte
	out   [][]byte
	due   []entry
	// How the thread that owns the writer last woke (see traced).
	woke, aimed     int64
	by              wakeKind
	armCPU, wakeCPU int32
}

func newWriter(batch int) *writer {
	return &writer{slots: make([][]byte, batch), out: make([][]byte, 0, batch), due: make([]entry, 0, batch), armCPU: -1, wakeCPU: -1}
}

// collect moves every packet the writer may hand over by now, up to a
// batch, from the queue to w.due: the ones released by then, and behind
// them the ones within their look-ahead (see releaseAhead). The caller
// holds p.mu.
func (p *pump) collect(now int64, w *writer) {
	w.due = w.due[:0]
	for p.q.len() > 0 && len(w.due) < cap(w.due) && p.q.peek().release-p.q.peek().ahead <= now {
		w.due = append(w.due, p.q.pop())
	}
}

// deliver writes w.due to dst in one batch and recycles the packet
// buffers; it counts each packet on time or late against its release. The
// caller set p.writing; deliver clears it and wakes the writer if packets
// wait behind this Write. It returns an error only when dst is closed.
func (p *pump) deliver(w *writer) error {
	w.out = w.out[:0]
	var bytes uint64
	var late uint64
	// A packet is late when it is handed over more than OnTimeSlack after
	// its release less the lead: it then enters the stack that late.
	lead := p.lead.get()
	now := p.now() + lead
	for j, e := range w.due {
		if now-e.release > int64(OnTimeSlack) {
			late++
		}
		if w.slots[j] == nil {
			w.slots[j] = make([]byte, Headroom+maxPacket)
		}
		b := w.slots[j][:Headroom+e.n]
		copy(b[Headroom:], e.buf[Headroom:Headroom+e.n])
		w.out = append(w.out, b)
		bytes += uint64(e.n)
	}
	var before uint64
	if p.dep != nil {
		before = p.dep.count()
	}
	start := p.now()
	_, err := p.dst.Write(w.out, Headroom)
	var entered int64
	if p.dep != nil && len(w.due) == 1 && p.dep.count() == before+1 {
		// One packet, delivered by this Write: its cost is clean. (A
		// batch's first packet also waits for the coalescing of the
		// rest.)
		entered = p.dep.at(before) + p.depOff
		p.lead.observe(entered - start)
	}
	end := p.now()
	p.c.writeTime.Add(uint64(max(end-start, 0)))
	if p.trace != nil {
		for _, e := range w.due {
			p.trace(e.buf[Headroom:Headroom+e.n], traced{e.arrival, e.release, lead, start, entered, end, w.woke, w.aimed, w.by, w.armCPU, w.wakeCPU})
		}
	}
	p.c.batches.Add(1)
	// Write may have exchanged the slices between indexes; they are all
	// still ours.
	for j, b := range w.out {
		w.slots[j] = b[:cap(b)]
	}
	p.mu.Lock()
	for i := range w.due {
		p.free = append(p.free, w.due[i].buf)
		w.due[i] = entry{}
	}
	p.writing = false
	wake := p.waiting && p.q.len() > 0
	p.waiting = p.waiting && !wake
	p.mu.Unlock()
	if wake {
		p.signal()
	}
	if err != nil {
		if errClosed(err) {
			return err
		}
		p.c.writeErrors.Add(1)
		return nil
	}
	p.c.packetsOut.Add(uint64(len(w.due)))
	p.c.bytesOut.Add(bytes)
	p.c.onTime.Add(uint64(len(w.due)) - late)
	if late > 0 {
		p.c.late.Add(late)
	}
	return nil
}

// currentCPU is the CPU the calling thread runs on.
func currentCPU() int32 {
	var cpu uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); errno != 0 {
		return -1
	}
	return int32(cpu)
}

// signal wakes the writer if it waits in await.
func (p *pump) signal() {
	var one = [8]byte{1}
	_, _ = unix.Write(p.wake, one[:])
}

// await blocks the writer's thread in poll(2) on the eventfd and the timer
// until signal, the timer or for timeoutMs (-1: no limit), and reports
// whether the timer fired. The writer waits here rather than on a
// sync.Cond or a Go timer: those wake a locked goroutine through whichever
// thread of normal priority runs the scheduler next, and on a busy machine
// that took long enough (tens of ms) to overflow the queue. The kernel wakes
// this thread directly.
func (p *pump) await(timeoutMs int) (timer bool) {
	fds := []unix.PollFd{{Fd: int32(p.wake), Events: unix.POLLIN}, {Fd: int32(p.timer), Events: unix.POLLIN}}
	if n, _ := unix.Poll(fds, timeoutMs); n > 0 {
		var buf [8]byte
		if fds[0].Revents != 0 {
			_, _ = unix.Read(p.wake, buf[:]) // reset the counter
		}
		if fds[1].Revents != 0 {
			_, _ = unix.Read(p.timer, buf[:])
			timer = true
		}
	}
	return timer
}

// releaseAhead lets the writer take, with the packet that woke it, the
// packets due within the next 100 µs that wait for the line: a packet may
// leave up to 100 µs early, but never by more than it waited behind the
// serializer or behind a packet the FIFO clamp keeps it after (the held
// time shaper.admit reports). So a stream that fills the link's rate
// leaves in batches, and a packet whose release is its own arrival plus
// its own delay (a probe, a ping, a packet of a stream below the rate)
// leaves on time, never below the link's least delay: two probes released
// 80 µs apart once left together, the second 20 µs under it. The rate and
// order are unchanged, and a saturating stream's batches grow from about
// one packet to several, which lets Write coalesce them and halves the CPU
// a 1 Gbit/s stream costs (measured: 1.2 → 0.45 cores, most of it the
// namespaces' own TCP stacks running in Write).
const releaseAhead = int64(100 * time.Microsecond)

// spinWindow is how long before a release the writer stops sleeping and
// spins on the clock: nanosleep returns tens of µs late, and by a varying
// amount, so the writer sleeps until its median lateness plus this window
// before the release and spins the rest. A packet then leaves within about
// a µs of its release whenever the wake-up was no later than usual. The
// cost is this window (and the wake-ups' spread) of CPU per wake-up, about
// 2 % of a core for a probe every millisecond; in a stream the writer
// wakes once per batch.
const spinWindow = int64(20 * time.Microsecond)

// sleep waits about d nanoseconds, as planWait says, and notes in w how
// it woke; the writer's loop then looks at the queue again.
func (p *pump) sleep(d int64, w *writer) {
	switch how, v := planWait(d, p.sleepLate.get(), p.sh.reorder); how {
	case waitPoll:
		t0 := p.now()
		p.await(int(v))
		w.woke, w.aimed, w.by, w.armCPU, w.wakeCPU = p.now(), t0+v*int64(time.Millisecond), wakePoll, -1, -1
	case waitNanosleep:
		t0 := p.now()
		ts := unix.NsecToTimespec(v)
		_ = unix.Nanosleep(&ts, nil) // EINTR: the loop looks again
		now := p.now()
		p.sleepLate.observe(now - t0 - v)
		w.woke, w.aimed, w.by, w.armCPU, w.wakeCPU = now, t0+v, wakeNanosleep, -1, -1
	case waitSpin:
		for end := p.now() + v; p.now() < end; {
		}
	}
}

// calibrate measures the writer thread's nanosleep lateness before the
// first packet, so that the first packets are released as precisely as
// later ones. It takes about 2 ms.
func (p *pump) calibrate() {
	const n, d = 64, int64(20 * time.Microsecond)
	for range n {
		t0 := p.now()
		ts := unix.NsecToTimespec(d)
		_ = unix.Nanosleep(&ts, nil)
		p.sleepLate.observe(p.now() - t0 - d)
	}
}

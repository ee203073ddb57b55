package emulator

import "golang.org/x/sys/unix"

// The writer of a sparse flow (a probe, a ping, a request and its
// response) runs under SCHED_FIFO from the moment the reader arms its
// timer until it has written the packet. The probe's trace showed where
// late packets lost their time (docs/topology.md, "Accuracy"): their
// writer woke after its aim because its CPU was taken when the timer
// fired, or woke in time and was preempted while it spun; a longer spin
// halved the first kind and doubled the second. A real-time thread is
// neither kept waiting by normal threads when its timer fires nor
// preempted by them while it spins. A stream never arms the timer (its
// writer always has a head to sleep toward), so its writer stays under
// the normal policy and pays nothing: as a real-time thread it would run
// the receiving namespace's stack for bulk traffic, which could starve a
// shared host's workloads (why a writer under SCHED_FIFO throughout was
// not adopted), and switching policy around every batch cost a fifth more
// CPU per Gbit/s. Without CAP_SYS_NICE the writer keeps the normal policy.

// rtPriority is the writer's SCHED_FIFO priority: the lowest, above every
// normal thread, below the kernel's real-time threads.
const rtPriority = 1

// setRealtime puts thread tid under SCHED_FIFO, or back under the normal
// policy at the pumps' nice value (priority), and reports whether it could.
func setRealtime(tid int, on bool) bool {
	attr := unix.SchedAttr{Policy: unix.SCHED_NORMAL, Nice: priority}
	if on {
		attr = unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: rtPriority}
	}
	return unix.SchedSetAttr(tid, &attr, 0) == nil
}

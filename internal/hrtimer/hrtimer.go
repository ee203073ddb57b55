// Package hrtimer waits until a point in time with the kernel's
// high-resolution timers.
//
// A Go timer fires late by up to a millisecond while its process has nothing
// else to do: the runtime then sleeps in epoll_wait(2), whose timeout is in
// whole milliseconds, and rounds any shorter wait up to 1 ms. A load
// generator that paces requests 100 µs apart with Go timers therefore sends
// them late, and in bursts, whenever the target answers fast enough to leave
// it idle: at seed 002's rate cell (README "Performance") requests to the
// direct path left up to 1.2 ms after their intended start (p99), which the
// coordinated-omission correction then counts as latency of the path. On
// Linux a Timer is a timerfd(2) that the runtime's poller waits on, so the
// kernel wakes the poller when the timer expires, to the microsecond.
// Elsewhere it is a Go timer.
package hrtimer

import "time"

// Wait waits until deadline: it returns nil then (at once if deadline has
// passed), or the Timer's context's error if that ends first, or an error
// if the Timer is closed. Should the kernel's timer fail, it waits on the
// runtime's instead. One goroutine at a time may wait on a Timer.
func (t *Timer) Wait(deadline time.Time) error {
	if err := t.ctx.Err(); err != nil {
		return err
	}
	d := time.Until(deadline)
	if d <= 0 {
		return nil
	}
	return t.wait(d)
}

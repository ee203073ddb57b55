package gateway

import "time"

// udpBudget bounds the datagrams one import address is read at
// (UDPConfig.ImportRate), in windows of about 10 ms: a window's quota
// read, the socket stays unread until the window ends. One goroutine
// reads each import address and every datagram it reads costs the
// gateway a stream write, encryption and the exporting gateway's send;
// without a bound an import flooded as fast as its clients can send took
// the gateway's CPU from every other import (README, "A UDP flood at one
// import"). Leaving the socket unread, rather than reading and dropping,
// makes the excess cost the gateway nothing: the kernel drops it at the
// full socket, and the gateway counts those drops from the socket's own
// counter (SO_MEMINFO) across each pause.
type udpBudget struct {
	quota  int           // datagrams per window
	window time.Duration // quota at the rate
	left   int           // datagrams left in this window
	end    time.Time     // when this window ends
}

// udpBudgetWindow is the longest a datagram under the rate waits for the
// next window, and the granularity of the bound.
const udpBudgetWindow = 10 * time.Millisecond

func newUDPBudget(rate int) *udpBudget {
	quota := max(1, int(int64(rate)*int64(udpBudgetWindow)/int64(time.Second)))
	return &udpBudget{quota: quota, window: time.Duration(int64(quota) * int64(time.Second) / int64(rate))}
}

// spend takes one datagram of the window's quota; false when none is
// left, and the caller renews the window before reading.
func (b *udpBudget) spend() bool {
	if b.left > 0 {
		b.left--
		return true
	}
	return false
}

// renew starts the next window, taking one datagram of it, and returns
// how long the caller must wait before reading: until the spent window
// ends, or 0 when it has.
func (b *udpBudget) renew(now time.Time) (wait time.Duration) {
	if now.Before(b.end) {
		wait = b.end.Sub(now)
		now = b.end
	}
	b.left, b.end = b.quota-1, now.Add(b.window)
	return wait
}

package gateway

import (
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// streamLimit bounds the connections a gateway carries at once: client
// connections of its imports (egress) and target connections of incoming
// streams (ingress) share one budget, because each holds a file
// descriptor, goroutines and buffers of this process. Past it a new
// connection is refused at once (a reset for a client, a stream reset with
// the reason for a peer) rather than accepted and left waiting, and the
// gateway never runs out of descriptors or memory for the streams it
// already carries. See the README's "Concurrency limits".
type streamLimit struct {
	max    int64
	active atomic.Int64

	// The refusals are logged once per refuseLogInterval, with how many
	// there were since: a flood must not turn into a log flood.
	lastLog  atomic.Int64 // unix nanoseconds of the last log line
	unlogged atomic.Int64
}

// refuseLogInterval is how often refusals at the limit are logged.
const refuseLogInterval = 10 * time.Second

// admit takes a place, or reports that the gateway is full.
func (l *streamLimit) admit() bool {
	if l.active.Add(1) > l.max {
		l.active.Add(-1)
		return false
	}
	return true
}

func (l *streamLimit) release() { l.active.Add(-1) }

// refusedAtLimit counts a refusal at the limit and logs the ones not
// logged yet, at most once per interval.
func (g *Gateway) refusedAtLimit(point int) {
	g.metrics.limitRefused[point].Inc()
	l := &g.limit
	l.unlogged.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last < int64(refuseLogInterval) || !l.lastLog.CompareAndSwap(last, now) {
		return
	}
	g.log.Warn("connections refused: gateway at max-streams", "refused", l.unlogged.Swap(0),
		"point", pointNames[point], "max-streams", l.max, "interval", refuseLogInterval.String())
}

// admitClient takes a place for a client connection accepted on an
// import, or resets it (counted) when the gateway is full. The caller
// releases the place when the connection ends.
func (g *Gateway) admitClient(c *net.TCPConn) bool {
	if g.limit.admit() {
		return true
	}
	g.refusedAtLimit(pointEgress)
	abort(c)
	return false
}

// defaultMaxStreams derives max-streams from RLIMIT_NOFILE (which Go
// raised to the hard limit at start): half the descriptors, at most
// maxDefaultStreams. The other half is for everything but carried
// connections: import listening sockets (one per import address in
// listeners mode), sessions, warm target connections, the admin, DNS and
// metrics sockets.
func defaultMaxStreams() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 1024
	}
	return int(min(r.Cur/2, maxDefaultStreams))
}

// maxDefaultStreams caps the default where memory, not descriptors,
// would run out first; see the README's "Concurrency limits" for what a
// stream costs.
const maxDefaultStreams = 65536

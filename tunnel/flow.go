package tunnel

import (
	"math/bits"
	"sync"
	"time"
)

// recvWindow is the receive side of one flow-control window (a stream's or
// the session's). It auto-tunes the way quic-go does: a window that the
// application consumed within about two round trips of data was the
// bottleneck, so it doubles, up to max. Unlike a fixed large window, memory is
// committed only to streams that actually move data fast.
type recvWindow struct {
	size     uint64 // current window size
	max      uint64
	limit    uint64 // absolute limit advertised to the peer
	consumed uint64 // bytes the application consumed (or that were discarded)

	epochStart  time.Time
	epochOffset uint64
}

func newRecvWindow(initial, max uint64, now time.Time) recvWindow {
	if max < initial {
		max = initial
	}
	return recvWindow{size: initial, max: max, limit: initial, epochStart: now}
}

// consume records n consumed bytes and returns the new limit to announce when
// at least a quarter of the window was used since the last announcement.
func (w *recvWindow) consume(n uint64, now time.Time, rtt time.Duration) (uint64, bool) {
	w.consumed += n
	if w.limit-w.consumed > w.size*3/4 {
		return 0, false
	}
	w.autotune(now, rtt)
	w.limit = w.consumed + w.size
	return w.limit, true
}

// minTuneRTT is the smallest round-trip time auto-tuning assumes. On
// loopback or a LAN the measured RTT is tens of microseconds, while the
// credit loop really takes a reader wake-up, a writer flush and the peer's
// wake-up: with the raw RTT a 256 KiB window never grew there and one stream
// lost about a fifth of its rate.
const minTuneRTT = time.Millisecond

func (w *recvWindow) autotune(now time.Time, rtt time.Duration) {
	inEpoch := w.consumed - w.epochOffset
	if inEpoch <= w.size/2 || rtt == 0 || w.size >= w.max {
		return
	}
	rtt = max(rtt, minTuneRTT)
	fraction := float64(inEpoch) / float64(w.size)
	if now.Sub(w.epochStart) < time.Duration(4*fraction*float64(rtt)) {
		w.size = min(2*w.size, w.max)
	}
	w.epochStart = now
	w.epochOffset = w.consumed
}

// grow raises the window size to at least size (capped at max) and returns
// the new limit to announce, if it changed.
func (w *recvWindow) grow(size uint64) (uint64, bool) {
	size = min(size, w.max)
	if size <= w.size {
		return 0, false
	}
	w.size = size
	if l := w.consumed + w.size; l > w.limit {
		w.limit = l
		return l, true
	}
	return 0, false
}

// Receive buffers come from size classes 4 KiB … 64 KiB, so a frame never
// occupies more than twice its size and a window bounds memory.
const (
	minChunkShift = 12
	maxChunkShift = 16
)

var chunkPools [maxChunkShift - minChunkShift + 1]sync.Pool

func getChunk(n int) []byte {
	c := chunkClass(n)
	if v := chunkPools[c].Get(); v != nil {
		return (*v.(*[]byte))[:0]
	}
	return make([]byte, 0, 1<<(c+minChunkShift))
}

func putChunk(b []byte) {
	c := chunkClass(cap(b))
	if cap(b) != 1<<(c+minChunkShift) {
		return
	}
	b = b[:0]
	chunkPools[c].Put(&b)
}

func chunkClass(n int) int {
	if n <= 1<<minChunkShift {
		return 0
	}
	c := bits.Len(uint(n-1)) - minChunkShift
	return min(c, maxChunkShift-minChunkShift)
}

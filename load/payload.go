package load

import "encoding/binary"

// FillPayload fills b with the pseudo-random bytes of request seq of
// thread. The bytes differ between requests, so an echo that returns a
// stale or shifted body is caught, and anyone can regenerate them (a recv
// server that wants to check what arrived, a test). Warm-up requests use
// seq ≤ 0.
func FillPayload(b []byte, thread, seq int) {
	// splitmix64: a few cycles per 8 bytes, so even 10 MB bodies cost
	// milliseconds, and they are filled before the request's clock starts.
	x := uint64(uint32(thread))<<32 | uint64(uint32(seq))
	x ^= 0x5f3759df_a5a5a5a5
	next := func() uint64 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		return z ^ z>>31
	}
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, next())
		b = b[8:]
	}
	if len(b) > 0 {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], next())
		copy(b, tail[:])
	}
}

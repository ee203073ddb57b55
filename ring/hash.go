package ring

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// The hashes here are fixed functions, not hash/maphash: maphash seeds are
// random per process, and every gateway must compute the same table and the
// same key for a flow.

// Distinct odd constants keep the offset, skip, seed and key hashes of one
// name independent of each other.
const (
	golden    = 0x9e3779b97f4a7c15 // 2^64 / φ
	offsetKey = 0xa0761d6478bd642f
	skipKey   = 0xe7037ed1a0b428db
	seedKey   = 0x8ebc6af09c88c6e3
	flowKey0  = 0x589965cc75374cc3
	flowKey1  = 0x1d8e4e27c47d124f
	flowKey2  = 0xc2b2ae3d27d4eb4f
)

// mix64 is MurmurHash3's 64-bit finalizer: a bijection in which every input
// bit flips each output bit with probability close to 1/2.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// hashString is 64-bit FNV-1a finished with mix64: FNV alone leaves
// similar names ("gw-1", "gw-2") with similar high bits.
func hashString(s string, seed uint64) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h ^ mix64(seed+golden))
}

// mum folds a 128-bit product into 64 bits (as wyhash does); one
// multiplication mixes two words.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// KeyOf hashes a flow's 5-tuple into a key for Lookup. IPv4 addresses and
// their IPv4-mapped IPv6 forms give the same key; zones are ignored. The
// key is directional: swapping src and dst gives a different key, which is
// what a sending gateway wants, since it sees each flow in one direction.
func KeyOf(proto uint8, src, dst netip.AddrPort) uint64 {
	s := src.Addr().As16()
	d := dst.Addr().As16()
	ports := uint64(src.Port())<<24 | uint64(dst.Port())<<8 | uint64(proto)
	h := mum(binary.LittleEndian.Uint64(s[:8])^flowKey0, binary.LittleEndian.Uint64(s[8:])^flowKey1)
	h = mum(h^binary.LittleEndian.Uint64(d[:8])^flowKey2, binary.LittleEndian.Uint64(d[8:])^offsetKey)
	return mum(h^ports^skipKey, golden)
}

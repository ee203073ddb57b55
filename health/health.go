// Package health answers and sends the UDP probes that tell whether a local
// gateway process is alive, for whatever spreads a cluster's clients over
// its gateways (in the lab, a resilient nexthop group on the client node).
//
// UDP rather than TCP connects: a probe is one small datagram each way, it
// leaves no connection state or TIME_WAIT behind at hundreds of probes per
// second, and a killed gateway is seen at once — its port is closed, so the
// kernel answers the next probe with ICMP port unreachable, which a
// connected UDP socket reports as ECONNREFUSED. A gateway that stops
// answering without such an error (a frozen process, a dead node) is dead
// after Misses intervals without a reply.
//
// Wire format, version 1: 12 bytes, big-endian:
//
//	+----------------+----------------+----------------------------------+
//	| magic "SH" 16  | version 8 | 0 8 |            seq 64                |
//	+----------------+----------------+----------------------------------+
//
// The responder sends every valid probe back unchanged and ignores
// everything else.
package health

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ProbeLen is the length of a probe datagram.
const ProbeLen = 12

const (
	magic   = "SH"
	version = 1
)

// Encode writes a probe with seq into b, which must hold ProbeLen bytes.
func Encode(b []byte, seq uint64) {
	copy(b, magic)
	b[2], b[3] = version, 0
	binary.BigEndian.PutUint64(b[4:], seq)
}

// Decode checks a probe datagram and returns its sequence number.
func Decode(b []byte) (uint64, error) {
	switch {
	case len(b) != ProbeLen:
		return 0, fmt.Errorf("health probe: length %d, want %d", len(b), ProbeLen)
	case string(b[:2]) != magic:
		return 0, errors.New("health probe: bad magic, want \"SH\"")
	case b[2] != version:
		return 0, fmt.Errorf("health probe: version %d, want %d", b[2], version)
	case b[3] != 0:
		return 0, fmt.Errorf("health probe: reserved byte %d, want 0", b[3])
	}
	return binary.BigEndian.Uint64(b[4:]), nil
}

package linkcheck

import (
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"
)

// A probe datagram is a fixed header, big endian, optionally padded:
//
//	magic   uint32  "STPR"
//	kind    uint8   echo request, echo reply or flood
//	_       [3]byte
//	session uint64  ties flood packets to the exchange that announced them
//	seq     uint64
//	t1      int64   client send time, CLOCK_MONOTONIC ns
//	t2      int64   server receive time
//	t3      int64   server send time
//
// Both ends run on one host, so CLOCK_MONOTONIC is one clock: t2-t1 and
// the reply's receive time minus t3 are the one-way delays.
const (
	probeMagic     = 0x53545052 // "STPR"
	probeHeaderLen = 48
)

type probeKind uint8

const (
	kindEcho probeKind = iota + 1
	kindReply
	kindFlood
)

type probe struct {
	kind       probeKind
	session    uint64
	seq        uint64
	t1, t2, t3 int64
}

var errNotProbe = errors.New("not a probe datagram")

func (p *probe) encode(b []byte) []byte {
	b = b[:max(len(b), probeHeaderLen)]
	binary.BigEndian.PutUint32(b[0:], probeMagic)
	b[4], b[5], b[6], b[7] = byte(p.kind), 0, 0, 0
	binary.BigEndian.PutUint64(b[8:], p.session)
	binary.BigEndian.PutUint64(b[16:], p.seq)
	binary.BigEndian.PutUint64(b[24:], uint64(p.t1))
	binary.BigEndian.PutUint64(b[32:], uint64(p.t2))
	binary.BigEndian.PutUint64(b[40:], uint64(p.t3))
	return b
}

func decodeProbe(b []byte) (probe, error) {
	if len(b) < probeHeaderLen || binary.BigEndian.Uint32(b) != probeMagic {
		return probe{}, errNotProbe
	}
	p := probe{
		kind:    probeKind(b[4]),
		session: binary.BigEndian.Uint64(b[8:]),
		seq:     binary.BigEndian.Uint64(b[16:]),
		t1:      int64(binary.BigEndian.Uint64(b[24:])),
		t2:      int64(binary.BigEndian.Uint64(b[32:])),
		t3:      int64(binary.BigEndian.Uint64(b[40:])),
	}
	if p.kind < kindEcho || p.kind > kindFlood {
		return probe{}, errNotProbe
	}
	return p, nil
}

// monoNow is CLOCK_MONOTONIC in nanoseconds, comparable between the
// processes in the two namespaces (Go's own monotonic readings are relative
// to each process's start).
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

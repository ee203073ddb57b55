package packet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// The liveness probe the programs answer (docs/packet.md, "Health"). A
// prober sends, from its UDP socket to a peer gateway's VXLAN port, a VXLAN
// frame whose inner packet is UDP from the prober's underlay address and
// socket port to the peer's underlay address and the probe port; the
// peer's tun_ingress sends it back with addresses and ports swapped, and
// this node's tun_ingress hands the answer to the stack, which delivers its
// payload to the prober's socket. Only the payload is read back: the
// headers are the kernel's to check.

// probeMagic starts every probe payload.
var probeMagic = [4]byte{'S', 'P', 'R', 'B'}

const (
	probeVersion = 1
	// ProbePayloadLen is the payload's size: magic, version, three zero
	// bytes, the prober's nonce and the send time.
	ProbePayloadLen = 4 + 1 + 3 + 8 + 8
	vxlanHeaderLen  = 8
	// ProbeFrameLen is what a prober sends: the VXLAN header, an inner
	// Ethernet, IPv4 and UDP header, and the payload.
	ProbeFrameLen = vxlanHeaderLen + 14 + 20 + 8 + ProbePayloadLen
)

// ProbePayload is what a probe carries and its answer brings back
// unchanged.
type ProbePayload struct {
	// Nonce is the prober's random number: an answer with another is not
	// this prober's.
	Nonce uint64
	// Sent is when the probe left, in the prober's monotonic nanoseconds.
	Sent int64
}

// AppendBinary appends the payload's wire form to b.
func (p ProbePayload) AppendBinary(b []byte) ([]byte, error) {
	if p.Sent < 0 {
		return nil, fmt.Errorf("probe: send time %d: must not be negative", p.Sent)
	}
	b = append(b, probeMagic[:]...)
	b = append(b, probeVersion, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, p.Nonce)
	return binary.BigEndian.AppendUint64(b, uint64(p.Sent)), nil
}

// ParseProbePayload decodes a probe answer's payload, naming what is wrong
// with one that is not a probe of this version.
func ParseProbePayload(b []byte) (ProbePayload, error) {
	if len(b) != ProbePayloadLen {
		return ProbePayload{}, fmt.Errorf("probe payload: %d bytes, want %d", len(b), ProbePayloadLen)
	}
	if [4]byte(b[:4]) != probeMagic {
		return ProbePayload{}, errors.New("probe payload: no probe magic")
	}
	if b[4] != probeVersion {
		return ProbePayload{}, fmt.Errorf("probe payload: version %d, want %d", b[4], probeVersion)
	}
	if b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return ProbePayload{}, errors.New("probe payload: reserved bytes not zero")
	}
	sent := binary.BigEndian.Uint64(b[16:])
	if sent > 1<<63-1 {
		return ProbePayload{}, fmt.Errorf("probe payload: send time %d out of range", sent)
	}
	return ProbePayload{Nonce: binary.BigEndian.Uint64(b[8:]), Sent: int64(sent)}, nil
}

// ProbeFrame is the VXLAN frame of one probe from src:sport to dst's probe
// port, to be sent in a UDP datagram to dst's VXLAN port.
func ProbeFrame(vni uint32, src netip.Addr, sport uint16, dst netip.Addr, port uint16, p ProbePayload) ([]byte, error) {
	if !src.Unmap().Is4() || !dst.Unmap().Is4() {
		return nil, fmt.Errorf("probe %v → %v: the packet mode carries IPv4 only", src, dst)
	}
	if vni >= 1<<24 {
		return nil, fmt.Errorf("probe: vni %d: allowed 0..16777215", vni)
	}
	b := make([]byte, 0, ProbeFrameLen)
	b = append(b, 0x08, 0, 0, 0) // VXLAN: the VNI is valid
	b = binary.BigEndian.AppendUint32(b, vni<<8)
	// Inner Ethernet: locally administered addresses, neither of them the
	// receiving VXLAN device's (its receive path drops frames from its
	// own address); tun_ingress ignores them.
	b = append(b, 0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00)
	ip := len(b)
	udpLen := 8 + ProbePayloadLen
	b = append(b, 0x45, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(20+udpLen))
	b = append(b, 0, 0, 0x40, 0, 64, 17, 0, 0) // id 0, DF, TTL 64, UDP, checksum below
	s4, d4 := src.Unmap().As4(), dst.Unmap().As4()
	b = append(b, s4[:]...)
	b = append(b, d4[:]...)
	binary.BigEndian.PutUint16(b[ip+10:], ^csumFold(csumSum(0, b[ip:ip+20])))
	udp := len(b)
	b = binary.BigEndian.AppendUint16(b, sport)
	b = binary.BigEndian.AppendUint16(b, port)
	b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
	b = append(b, 0, 0)
	b, err := p.AppendBinary(b)
	if err != nil {
		return nil, err
	}
	// The UDP checksum over the pseudo-header and the datagram.
	sum := csumSum(0, s4[:])
	sum = csumSum(sum, d4[:])
	sum += 17 + uint32(udpLen)
	sum = csumSum(sum, b[udp:])
	c := ^csumFold(sum)
	if c == 0 {
		c = 0xffff // 0 would mean no checksum
	}
	binary.BigEndian.PutUint16(b[udp+6:], c)
	return b, nil
}

// csumSum adds b's 16-bit big-endian words to sum (an odd last byte padded).
func csumSum(sum uint32, b []byte) uint32 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

func csumFold(sum uint32) uint16 {
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return uint16(sum)
}

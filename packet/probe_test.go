package packet

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestProbeFrame: a probe's frame is VXLAN with the VNI, an inner Ethernet
// frame whose source is not zero, IPv4 UDP from src:sport to dst's probe
// port with both checksums right, and the payload, which decodes back.
func TestProbeFrame(t *testing.T) {
	src, dst := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.3.2")
	want := ProbePayload{Nonce: 0x0123456789abcdef, Sent: 42 * int64(time.Millisecond)}
	b, err := ProbeFrame(7, src, 40000, dst, DefaultProbePort, want)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != ProbeFrameLen {
		t.Fatalf("%d bytes, want %d", len(b), ProbeFrameLen)
	}
	if b[0] != 0x08 || binary.BigEndian.Uint32(b[4:])>>8 != 7 {
		t.Errorf("VXLAN header % x: want the I flag and VNI 7", b[:8])
	}
	eth := b[8:]
	if binary.BigEndian.Uint16(eth[12:]) != 0x0800 || bytes.Equal(eth[6:12], make([]byte, 6)) {
		t.Errorf("inner Ethernet header % x", eth[:14])
	}
	ip := eth[14:]
	if fold(csumSum(0, ip[:20])) != 0xffff {
		t.Errorf("IPv4 header checksum does not verify: % x", ip[:20])
	}
	if ip[9] != 17 || netip.AddrFrom4([4]byte(ip[12:16])) != src || netip.AddrFrom4([4]byte(ip[16:20])) != dst {
		t.Errorf("IPv4 header % x: want UDP %v → %v", ip[:20], src, dst)
	}
	if int(binary.BigEndian.Uint16(ip[2:])) != len(ip) {
		t.Errorf("IPv4 total length %d, want %d", binary.BigEndian.Uint16(ip[2:]), len(ip))
	}
	udp := ip[20:]
	if binary.BigEndian.Uint16(udp) != 40000 || binary.BigEndian.Uint16(udp[2:]) != DefaultProbePort {
		t.Errorf("UDP ports %d → %d", binary.BigEndian.Uint16(udp), binary.BigEndian.Uint16(udp[2:]))
	}
	sum := csumSum(csumSum(0, ip[12:20]), udp) + 17 + uint32(len(udp))
	if fold(sum) != 0xffff {
		t.Errorf("UDP checksum does not verify")
	}
	got, err := ParseProbePayload(udp[8:])
	if err != nil || got != want {
		t.Errorf("payload %+v, %v: want %+v", got, err, want)
	}
}

func fold(sum uint32) uint16 { return csumFold(sum) }

func TestProbeFrameErrors(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	for _, c := range []struct {
		name     string
		vni      uint32
		src, dst netip.Addr
		p        ProbePayload
		want     string
	}{
		{"IPv6 source", 1, v6, v4, ProbePayload{}, "IPv4 only"},
		{"IPv6 destination", 1, v4, v6, ProbePayload{}, "IPv4 only"},
		{"no address", 1, netip.Addr{}, v4, ProbePayload{}, "IPv4 only"},
		{"VNI", 1 << 24, v4, v4, ProbePayload{}, "vni"},
		{"send time", 1, v4, v4, ProbePayload{Sent: -1}, "negative"},
	} {
		if _, err := ProbeFrame(c.vni, c.src, 1, c.dst, 2, c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}

func TestParseProbePayloadErrors(t *testing.T) {
	good, _ := ProbePayload{Nonce: 1, Sent: 2}.AppendBinary(nil)
	with := func(i int, v byte) []byte {
		b := bytes.Clone(good)
		b[i] = v
		return b
	}
	sent := bytes.Clone(good)
	binary.BigEndian.PutUint64(sent[16:], 1<<63)
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "0 bytes"},
		{"short", good[:len(good)-1], "23 bytes"},
		{"long", append(bytes.Clone(good), 0), "25 bytes"},
		{"magic", with(0, 'X'), "magic"},
		{"version", with(4, 2), "version 2"},
		{"reserved", with(6, 1), "reserved"},
		{"send time", sent, "out of range"},
	} {
		if _, err := ParseProbePayload(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}

// FuzzProbePayload: the decoder of probe answers (read from a socket any
// peer's programs can reach) never panics, and what it accepts encodes
// back to the same bytes.
func FuzzProbePayload(f *testing.F) {
	good, _ := ProbePayload{Nonce: 1, Sent: 2}.AppendBinary(nil)
	f.Add(good)
	f.Add([]byte{})
	f.Add(make([]byte, ProbePayloadLen))
	f.Add(append([]byte("SPRB\x01\x00\x00\x00"), bytes.Repeat([]byte{0xff}, 16)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseProbePayload(b)
		if err != nil {
			return
		}
		again, err := p.AppendBinary(nil)
		if err != nil {
			t.Fatalf("%+v decoded from % x does not encode: %v", p, b, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("% x decoded to %+v, which encodes to % x", b, p, again)
		}
	})
}

func TestProberConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  ProberConfig
		want string
	}{
		{ProberConfig{}, ""},
		{ProberConfig{Interval: 5 * time.Millisecond, Misses: 6}, ""},
		{ProberConfig{Interval: time.Microsecond}, "probe interval"},
		{ProberConfig{Interval: time.Minute}, "probe interval"},
		{ProberConfig{Misses: -1}, "probe misses"},
		{ProberConfig{Misses: 1001}, "probe misses"},
		{ProberConfig{VNI: 1 << 24}, "vni"},
	} {
		err := c.cfg.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
}

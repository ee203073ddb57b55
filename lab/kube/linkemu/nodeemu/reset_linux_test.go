package nodeemu

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestResettable: which sockets ResetConnections ends: toward Remote (an
// IPv4-mapped peer too), on a listed port at either end, not listening or
// in TIME-WAIT.
func TestResettable(t *testing.T) {
	remote := []netip.Prefix{netip.MustParsePrefix("10.200.2.0/24")}
	ports := []uint16{4443}
	sock := func(family uint8, state uint8, src string, sport uint16, dst string, dport uint16) *netlink.Socket {
		s := &netlink.Socket{Family: family, State: state}
		s.ID.Source, s.ID.SourcePort = net.ParseIP(src), sport
		s.ID.Destination, s.ID.DestinationPort = net.ParseIP(dst), dport
		return s
	}
	for _, tc := range []struct {
		name string
		s    *netlink.Socket
		want bool
	}{
		{"dialed session", sock(unix.AF_INET, 1, "10.200.1.1", 47344, "10.200.2.1", 4443), true},
		{"accepted session, mapped", sock(unix.AF_INET6, 1, "::ffff:10.200.1.1", 4443, "::ffff:10.200.2.1", 47344), true},
		{"other port", sock(unix.AF_INET, 1, "10.200.1.1", 47344, "10.200.2.1", 6443), false},
		{"other peer", sock(unix.AF_INET, 1, "10.200.1.1", 47344, "10.200.3.1", 4443), false},
		{"IPv6 peer", sock(unix.AF_INET6, 1, "fd00::1", 4443, "fd00::2", 47344), false},
		{"listener", sock(unix.AF_INET6, tcpListen, "::", 4443, "::", 0), false},
		{"time-wait", sock(unix.AF_INET, tcpTimeWait, "10.200.1.1", 47344, "10.200.2.1", 4443), false},
	} {
		if got := resettable(tc.s, remote, ports); got != tc.want {
			t.Errorf("%s: resettable %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDiagRequest: the request names the socket as inet_diag_req_v2 lays
// it out: ports in network order, an IPv4 socket's addresses in the first
// four bytes of their fields, an IPv6 socket's in all sixteen, the cookie.
func TestDiagRequest(t *testing.T) {
	s := &netlink.Socket{Family: unix.AF_INET}
	s.ID.Source, s.ID.SourcePort = net.ParseIP("10.200.1.1"), 0x1234
	s.ID.Destination, s.ID.DestinationPort = net.ParseIP("10.200.2.1"), 4443
	s.ID.Cookie = [2]uint32{7, 9}
	b := diagRequest(s)
	if len(b) != 56 || b[0] != unix.AF_INET || b[1] != unix.IPPROTO_TCP {
		t.Fatalf("header % x", b[:8])
	}
	if !bytes.Equal(b[8:12], []byte{0x12, 0x34, 0x11, 0x5b}) {
		t.Errorf("ports % x, want 12 34 11 5b", b[8:12])
	}
	if !bytes.Equal(b[12:16], []byte{10, 200, 1, 1}) || !bytes.Equal(b[16:28], make([]byte, 12)) || !bytes.Equal(b[28:32], []byte{10, 200, 2, 1}) {
		t.Errorf("IPv4 addresses % x", b[12:44])
	}
	s.Family = unix.AF_INET6
	s.ID.Source = net.ParseIP("::ffff:10.200.1.1")
	b = diagRequest(s)
	if !bytes.Equal(b[12:28], net.ParseIP("::ffff:10.200.1.1").To16()) {
		t.Errorf("IPv6 source % x", b[12:28])
	}
	if c0, c1 := binary.NativeEndian.Uint32(b[48:]), binary.NativeEndian.Uint32(b[52:]); c0 != 7 || c1 != 9 {
		t.Errorf("cookie %d %d, want 7 9", c0, c1)
	}
}

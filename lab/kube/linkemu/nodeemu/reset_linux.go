package nodeemu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Why connections are reset: a TCP connection opened before the emulation
// keeps what it learnt of the path without it. The kernel keeps a
// connection's minimum RTT over 300 s (net.ipv4.tcp_min_rtt_wlen), and bbr
// starts from it when a socket switches to bbr (strait's gateways switch
// their sessions for lossy bulk, tunnel.Config.Congestion) and keeps its
// own minimum for 10 s: microseconds of a clean link where the emulated
// path takes tens of milliseconds, so bbr's window stays a few packets
// until its minimum expires. A real path does not shrink by three orders
// of magnitude under a running connection, and the namespace lab's links
// are emulated before any connection exists; ending the long-lived
// connections that cross the emulation makes them start over on it
// (docs/lab-clusters.md, "Measured").

// TCP states (include/net/tcp_states.h) a reset skips: nothing to end.
const (
	tcpTimeWait = 6
	tcpClose    = 7
	tcpListen   = 10
)

// ResetConnections ends every TCP connection of this network namespace
// toward remote (its peer address, IPv4 or IPv4-mapped IPv6, in a prefix)
// whose local or peer port is one of ports, as `ss -K` does (SOCK_DESTROY:
// the socket is closed with ECONNABORTED and a RST goes to the peer). It
// returns the connections ended, as "local>peer". A kernel without
// CONFIG_INET_DIAG_DESTROY fails with an error saying so.
func ResetConnections(remote []netip.Prefix, ports []uint16) ([]string, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	var ended []string
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		socks, err := netlink.SocketDiagTCP(family)
		if err != nil {
			return ended, fmt.Errorf("list TCP sockets: %w", err)
		}
		for _, s := range socks {
			if !resettable(s, remote, ports) {
				continue
			}
			if err := destroySocket(s); err != nil {
				switch {
				case errors.Is(err, unix.ENOENT):
					continue // gone meanwhile
				case errors.Is(err, unix.EOPNOTSUPP):
					return ended, errors.New("the kernel cannot end sockets (CONFIG_INET_DIAG_DESTROY unset)")
				}
				return ended, fmt.Errorf("end %s: %w", connName(s), err)
			}
			ended = append(ended, connName(s))
		}
	}
	return ended, nil
}

// resettable is whether s is a connection ResetConnections ends.
func resettable(s *netlink.Socket, remote []netip.Prefix, ports []uint16) bool {
	switch s.State {
	case tcpTimeWait, tcpClose, tcpListen:
		return false
	}
	if !slices.Contains(ports, s.ID.SourcePort) && !slices.Contains(ports, s.ID.DestinationPort) {
		return false
	}
	peer, ok := netip.AddrFromSlice(s.ID.Destination)
	if !ok {
		return false
	}
	peer = peer.Unmap()
	return slices.ContainsFunc(remote, func(p netip.Prefix) bool { return p.Contains(peer) })
}

func connName(s *netlink.Socket) string {
	return net.JoinHostPort(s.ID.Source.String(), fmt.Sprint(s.ID.SourcePort)) + ">" +
		net.JoinHostPort(s.ID.Destination.String(), fmt.Sprint(s.ID.DestinationPort))
}

// destroySocket sends SOCK_DESTROY for s: an inet_diag_req_v2
// (include/uapi/linux/inet_diag.h) naming it by family, addresses, ports
// and the cookie the dump gave, which the kernel checks so that a reused
// address pair is never hit. netlink.SocketDestroy does the same for IPv4
// sockets only, and the gateways' listeners are IPv6 sockets whose
// accepted connections carry IPv4-mapped addresses.
func destroySocket(s *netlink.Socket) error {
	req := nl.NewNetlinkRequest(nl.SOCK_DESTROY, unix.NLM_F_ACK)
	req.AddRawData(diagRequest(s))
	_, err := req.Execute(unix.NETLINK_INET_DIAG, 0)
	return err
}

// diagRequest encodes inet_diag_req_v2 for s: family, protocol, ext, pad,
// states (u32), then inet_diag_sockid: ports (big endian), source and
// destination (16 bytes each, an IPv4 address in the first 4), interface
// and cookie (host order).
func diagRequest(s *netlink.Socket) []byte {
	b := make([]byte, 56)
	b[0], b[1] = s.Family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(b[4:], ^uint32(0))
	binary.BigEndian.PutUint16(b[8:], s.ID.SourcePort)
	binary.BigEndian.PutUint16(b[10:], s.ID.DestinationPort)
	addr := func(ip net.IP) []byte {
		if s.Family == unix.AF_INET {
			return ip.To4()
		}
		return ip.To16()
	}
	copy(b[12:28], addr(s.ID.Source))
	copy(b[28:44], addr(s.ID.Destination))
	binary.NativeEndian.PutUint32(b[44:], s.ID.Interface)
	binary.NativeEndian.PutUint32(b[48:], s.ID.Cookie[0])
	binary.NativeEndian.PutUint32(b[52:], s.ID.Cookie[1])
	return b
}

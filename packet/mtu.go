package packet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// PathMTU is what this node's routing says of the underlay toward its peer
// gateways: the smallest MTU over their routes, and the peer and device
// that decided it (docs/packet.md, "MTU").
type PathMTU struct {
	MTU    int
	Peer   netip.Addr // the peer gateway whose route has the smallest MTU
	Device string     // the device that route leaves by
}

func (p PathMTU) String() string {
	return fmt.Sprintf("%d (route to %v via %s)", p.MTU, p.Peer, p.Device)
}

// RouteMTU is the MTU of the path this node's routing table gives toward
// dst: the route's own mtu when it has one (a locked metric, or a smaller
// path MTU the kernel learnt from an ICMP error), else the MTU of the
// device it leaves by. It asks the kernel (netlink, as `ip route get`) in
// the caller's network namespace.
func RouteMTU(dst netip.Addr) (PathMTU, error) {
	dst = dst.Unmap()
	if !dst.Is4() {
		return PathMTU{}, fmt.Errorf("route to %v: the packet mode carries IPv4 only", dst)
	}
	routes, err := netlink.RouteGet(net.IP(dst.AsSlice()))
	if err != nil {
		return PathMTU{}, fmt.Errorf("route to %v: %w", dst, err)
	}
	if len(routes) == 0 || routes[0].LinkIndex == 0 {
		return PathMTU{}, fmt.Errorf("route to %v: the kernel names no device", dst)
	}
	l, err := netlink.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return PathMTU{}, fmt.Errorf("route to %v: device %d: %w", dst, routes[0].LinkIndex, err)
	}
	mtu := l.Attrs().MTU
	if m := routes[0].MTU; m > 0 && m < mtu {
		mtu = m
	}
	// Loopback's 65536 (a peer on this node) is more than an IPv4 packet
	// can be, and more than the programs' settings accept.
	mtu = min(mtu, 65535)
	return PathMTU{MTU: mtu, Peer: dst, Device: l.Attrs().Name}, nil
}

// UnderlayPathMTU is the smallest RouteMTU over peers: one MSS clamp serves
// every peer, so it must fit the narrowest path. Peers without a route are
// left out and named in the error; ok is false when none had one.
func UnderlayPathMTU(peers []netip.Addr) (p PathMTU, ok bool, err error) {
	peers = slices.Clone(peers)
	slices.SortFunc(peers, netip.Addr.Compare) // the same peer decides a tie each time
	var errs []error
	for _, a := range peers {
		r, rerr := RouteMTU(a)
		if rerr != nil {
			errs = append(errs, rerr)
			continue
		}
		if !ok || r.MTU < p.MTU {
			p, ok = r, true
		}
	}
	return p, ok, errors.Join(errs...)
}

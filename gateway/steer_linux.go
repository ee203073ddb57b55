package gateway

import (
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// localRoutes lists the IPv4 routes of type local in every table.
func localRoutes() ([]netip.Prefix, error) {
	b, err := syscall.NetlinkRIB(unix.RTM_GETROUTE, unix.AF_INET)
	if err != nil {
		return nil, fmt.Errorf("netlink route dump: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWROUTE || len(m.Data) < unix.SizeofRtMsg {
			continue
		}
		// struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type.
		family, dstLen, typ := m.Data[0], m.Data[1], m.Data[7]
		if typ != unix.RTN_LOCAL || family != unix.AF_INET {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			continue
		}
		for _, a := range attrs {
			if a.Attr.Type == unix.RTA_DST && len(a.Value) == 4 {
				if p, err := netip.AddrFrom4([4]byte(a.Value)).Prefix(int(dstLen)); err == nil {
					out = append(out, p)
				}
			}
		}
	}
	return out, nil
}

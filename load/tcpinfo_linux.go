package load

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// tcpState reads the socket's congestion control and total retransmits
// (TCP_INFO); retrans is -1 when the kernel does not say.
func tcpState(c *net.TCPConn) (cc string, retrans int64) {
	retrans = -1
	sc, err := c.SyscallConn()
	if err != nil {
		return "", retrans
	}
	_ = sc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			retrans = int64(info.Total_retrans)
		}
		cc, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return cc, retrans
}

func setCC(fd uintptr, cc string) error {
	if err := unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc); err != nil {
		return fmt.Errorf("congestion control %q: %w (see /proc/sys/net/ipv4/tcp_available_congestion_control)", cc, err)
	}
	return nil
}

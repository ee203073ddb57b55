package tunnel

import (
	"net"

	"golang.org/x/sys/unix"
)

// tuneTCP applies Config's socket options to a TCP connection and returns
// the congestion control in use ("" when conn is not a TCP socket, e.g. a
// test wrapper).
func tuneTCP(conn net.Conn, cfg *Config) string {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return ""
	}
	_ = tc.SetNoDelay(true)
	if cfg.ReceiveBuffer > 0 {
		_ = tc.SetReadBuffer(cfg.ReceiveBuffer)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return ""
	}
	var algo string
	_ = raw.Control(func(fd uintptr) {
		if cfg.SendBuffer > 0 {
			// The kernel doubles the value for its bookkeeping, as with
			// SO_SNDBUF; without CAP_NET_ADMIN, SO_SNDBUF caps it at wmem_max.
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, cfg.SendBuffer) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, cfg.SendBuffer)
			}
		}
		if cfg.NotSentLowWater > 0 {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, cfg.NotSentLowWater)
		}
		want := cfg.Congestion
		if want == "" {
			want = "bbr"
		}
		if want != "system" {
			// Unavailable algorithms fail with ENOENT; the default stays.
			_ = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, want)
		}
		algo, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return algo
}

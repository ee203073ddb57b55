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
	if cfg.SendBuffer > 0 {
		_ = tc.SetWriteBuffer(cfg.SendBuffer)
	}
	if cfg.ReceiveBuffer > 0 {
		_ = tc.SetReadBuffer(cfg.ReceiveBuffer)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return ""
	}
	var algo string
	_ = raw.Control(func(fd uintptr) {
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

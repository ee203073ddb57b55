package tunnel

import (
	"net"
	"time"

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

// kernelSilence reports how long ago the kernel last received anything from
// the peer on conn: an ACK of our data or a data segment, in order or not.
// ok is false when conn is not a TCP socket.
func kernelSilence(conn net.Conn) (d time.Duration, ok bool) {
	tc, isTCP := conn.(*net.TCPConn)
	if !isTCP {
		return 0, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	cerr := raw.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if cerr != nil || err != nil {
		return 0, false
	}
	return time.Duration(min(info.Last_ack_recv, info.Last_data_recv)) * time.Millisecond, true
}

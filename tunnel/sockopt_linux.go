package tunnel

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// tuneTCP applies Config's socket options to a TCP connection. It returns
// the congestion control in use ("" when conn is not a TCP socket, e.g. a
// test wrapper) and, in the default mode, the one to switch to once the
// session carries bulk data (see Config.Congestion).
func tuneTCP(conn net.Conn, cfg *Config) (algo, upgrade string) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return "", ""
	}
	_ = tc.SetNoDelay(true)
	if cfg.ReceiveBuffer > 0 {
		_ = tc.SetReadBuffer(cfg.ReceiveBuffer)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return "", ""
	}
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
			// Start without pacing; bbr takes over at the first bulk
			// transfer, if the kernel has it.
			if unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, bulkCongestion) == nil {
				_ = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, burstCongestion)
				upgrade = bulkCongestion
			}
		} else if want != "system" {
			// Unavailable algorithms fail with ENOENT; the default stays.
			_ = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, want)
		}
		algo, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	if algo == upgrade {
		upgrade = ""
	}
	return algo, upgrade
}

// setCongestion switches conn's congestion control and returns the one in
// use afterwards.
func setCongestion(conn net.Conn, name string) string {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return ""
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return ""
	}
	var algo string
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
		algo, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return algo
}

// lossState returns how many segments the kernel retransmitted on conn so
// far, how many bytes wait in the socket unsent and how many the congestion
// window lets into flight; ok is false when conn is not a TCP socket.
func lossState(conn net.Conn) (retrans, notsent, window uint32, ok bool) {
	tc, isTCP := conn.(*net.TCPConn)
	if !isTCP {
		return 0, 0, 0, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return 0, 0, 0, false
	}
	var info *unix.TCPInfo
	cerr := raw.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if cerr != nil || err != nil {
		return 0, 0, 0, false
	}
	return info.Total_retrans, info.Notsent_bytes, info.Snd_cwnd * info.Snd_mss, true
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

package tunnel

import (
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/tunnel/wancc"
)

// setCC sets the congestion control of socket fd. Every choice of ours goes
// through it, so a test can see each algorithm a socket was ever given.
var setCC = func(fd int, name string) error {
	return unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
}

// availableCC is the kernel's tcp_available_congestion_control, read once.
var availableCC = sync.OnceValue(func() []string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
})

// ownCongestion is strait's congestion control for WAN sessions (package
// wancc), registered once per process, when the first WAN socket wants it.
var ownCongestion = wancc.NewPerProcess("strait_", wancc.Options{MinAllowance: wancc.WANAllowance})

// OwnCongestionLosses reports the losses strait's congestion control has
// answered in this process, by what it took them for; ok is false while no
// WAN socket of this process uses it (Config.Congestion).
func OwnCongestionLosses() (l wancc.Losses, ok bool) {
	a := ownCongestion.Registered()
	if a == nil {
		return l, false
	}
	l, err := a.Losses()
	return l, err == nil
}

var ownCongestionMissing sync.Once

// startCongestion is the congestion control a WAN socket starts with, ""
// for the namespace's default.
func startCongestion(cfg *Config) string {
	switch cfg.Congestion {
	case "":
		a, err := ownCongestion.Get()
		if err == nil {
			return a.Name()
		}
		ownCongestionMissing.Do(func() {
			cfg.logger().Warn("WAN sessions start on cubic: strait's congestion control cannot be loaded here (docs/congestion.md)", "err", err)
		})
		return burstCongestion
	case "system":
		return ""
	}
	return cfg.Congestion
}

// presetCongestion sets a socket's starting congestion control before it
// connects or listens (a listener's connections inherit it). The kernel
// initializes the algorithm a socket has when the connection is
// established, and bbr marks the socket for pacing on initialization, for
// good: a socket that ever started as bbr — the namespace default on many
// hosts, this one included — paces every burst even once it runs cubic.
func presetCongestion(cfg *Config) func(network, address string, c syscall.RawConn) error {
	name := startCongestion(cfg)
	return func(_, _ string, c syscall.RawConn) error {
		if name != "" {
			// An unavailable algorithm fails with ENOENT: the default
			// stays, as tuneTCP documents.
			_ = c.Control(func(fd uintptr) { _ = setCC(int(fd), name) })
		}
		return nil
	}
}

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
	start := startCongestion(cfg)
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
		algo, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		// A connection dialed or accepted without presetCongestion (a
		// Config.DialContext of the caller's) gets its algorithm here,
		// after the kernel initialized the default.
		if start != "" && algo != start {
			// Unavailable algorithms fail with ENOENT; the default stays.
			_ = setCC(int(fd), start)
			algo, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		}
	})
	// Bbr takes over at the first lossy bulk transfer, if the kernel has
	// it. Its availability is read from /proc, never tried on the socket:
	// setting it even for an instant would make the kernel pace the socket.
	if cfg.Congestion == "" && algo == start && slices.Contains(availableCC(), bulkCongestion) {
		upgrade = bulkCongestion
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
		_ = setCC(int(fd), name)
		algo, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return algo
}

// lossState reads what the bulk rule (lossyBulk) needs from conn's TCP_INFO;
// ok is false when conn is not a TCP socket.
func lossState(conn net.Conn) (st sockState, ok bool) {
	tc, isTCP := conn.(*net.TCPConn)
	if !isTCP {
		return st, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return st, false
	}
	var info *unix.TCPInfo
	cerr := raw.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
	if cerr != nil || err != nil {
		return st, false
	}
	return sockState{
		// Retransmissions the peer reported as duplicates (DSACK: the
		// original had arrived) were no loss.
		retrans:    info.Total_retrans - min(info.Dsack_dups, info.Total_retrans),
		notsent:    info.Notsent_bytes,
		cwnd:       uint64(info.Snd_cwnd) * uint64(info.Snd_mss),
		peerWindow: uint64(info.Snd_wnd),
	}, true
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

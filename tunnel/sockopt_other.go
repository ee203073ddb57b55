//go:build !linux

package tunnel

import (
	"net"
	"syscall"
	"time"

	"github.com/strait-net/strait/tunnel/wancc"
)

func tuneTCP(conn net.Conn, cfg *Config) (algo, upgrade string) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		if cfg.SendBuffer > 0 {
			_ = tc.SetWriteBuffer(cfg.SendBuffer)
		}
		if cfg.ReceiveBuffer > 0 {
			_ = tc.SetReadBuffer(cfg.ReceiveBuffer)
		}
	}
	return "", ""
}

func setCongestion(net.Conn, string) string { return "" }

// OwnCongestionLosses: strait's congestion control is Linux's only.
func OwnCongestionLosses() (wancc.Losses, bool) { return wancc.Losses{}, false }

func presetCongestion(*Config) func(network, address string, c syscall.RawConn) error { return nil }

func lossState(net.Conn) (sockState, bool) { return sockState{}, false }

func kernelSilence(net.Conn) (time.Duration, bool) { return 0, false }

//go:build !linux

package gateway

import (
	"net"
	"syscall"

	"github.com/strait-net/strait/tunnel/wancc"
)

// Strait's congestion control and TCP_CONGESTION are Linux's only: LAN
// sockets keep the system's.
func (g *Gateway) lanCongestion() (string, *wancc.Algorithm) { return "", nil }

func setCongestion(syscall.RawConn, string) error { return nil }

func (g *Gateway) setListenerCongestion(*net.TCPListener) {}

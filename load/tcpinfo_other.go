//go:build !linux

package load

import (
	"fmt"
	"net"
	"runtime"
)

// tcpState knows nothing here: TCP_INFO's retransmits and TCP_CONGESTION
// are read the Linux way.
func tcpState(*net.TCPConn) (cc string, retrans int64) { return "", -1 }

func setCC(_ uintptr, cc string) error {
	return fmt.Errorf("congestion control %q: not supported on %s", cc, runtime.GOOS)
}

//go:build !linux

package linkcheck

import (
	"fmt"
	"net"
	"runtime"
)

// fillTCPInfo leaves r as it is: the segment size, headers and congestion
// control come from Linux's TCP_INFO and TCP_CONGESTION.
func fillTCPInfo(*net.TCPConn, *BulkReport) {}

func setCongestion(_ *net.TCPConn, cc string) error {
	return fmt.Errorf("congestion control %q: not supported on %s", cc, runtime.GOOS)
}

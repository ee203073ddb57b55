//go:build !linux

package nodeemu

import (
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"

	"github.com/strait-net/strait/lab/emulation"
)

// errOS is why Run emulates nothing here: the emulation is Linux's veth
// pairs, qdiscs and tcx programs, and the connection resets its sock_diag
// (docs/lab-clusters.md). The package builds elsewhere so that cmd/strait
// does.
var errOS = fmt.Errorf("node link emulation is not supported on %s: it needs Linux", runtime.GOOS)

// checkCaps returns errOS, so that Run fails before it touches anything.
func checkCaps() error { return errOS }

func probeNetem(string, *slog.Logger) bool { return false }

func (p *path) addVeth(emulation.Params) error { return errOS }

// ResetConnections returns errOS when there are ports to reset.
func ResetConnections(_ []netip.Prefix, ports []uint16) ([]string, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	return nil, errOS
}

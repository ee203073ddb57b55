//go:build !linux

package gateway

import (
	"fmt"
	"net/netip"
	"runtime"
)

// localRoutes has no routing table to read here: it asks Linux's netlink
// for the local routes. localAddrs.has takes the error as "cannot tell".
func localRoutes() ([]netip.Prefix, error) {
	return nil, fmt.Errorf("local routes: not supported on %s (netlink is Linux's)", runtime.GOOS)
}

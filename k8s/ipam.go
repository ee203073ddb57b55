package k8s

import (
	"fmt"
	"net/netip"
)

// allocate returns the lowest address of prefix that is not in used,
// skipping the network address (and, for IPv4, the broadcast address), so
// clusterset IPs look like ordinary host addresses.
func allocate(prefix netip.Prefix, used map[netip.Addr]bool) (netip.Addr, error) {
	prefix = prefix.Masked()
	first := prefix.Addr().Next()
	for a := first; prefix.Contains(a); a = a.Next() {
		if a.Is4() && !prefix.Contains(a.Next()) {
			break // broadcast
		}
		if !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("clusterset IP range %s is exhausted (%d addresses in use)", prefix, len(used))
}

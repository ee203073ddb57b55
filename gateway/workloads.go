package gateway

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"

	"github.com/strait-net/strait/catalog"
)

// identity is who a client address belongs to, for policies.
type identity struct {
	ns     string
	labels map[string]string
}

// workloads maps client addresses to the Workload resources that claim
// them. The lookup map is read without locks on every new connection and
// replaced whole when Workloads change; the claims behind it are
// reconcile's (under Gateway.mu).
type workloads struct {
	// claims is every workload claiming an address, so that when two
	// claim one (a pod IP reused before the old pod's Workload is gone)
	// the winner does not depend on the order of changes: the smallest
	// key holds it, and the other takes over when it goes.
	claims map[netip.Addr][]catalog.Key
	of     map[catalog.Key]*catalog.Workload
}

// source finds who a client address belongs to: a Workload holding the
// exact address first, then the first configured source whose CIDR holds
// it (see README, "The interconnect").
func (g *Gateway) source(addr netip.Addr) (string, map[string]string) {
	addr = addr.Unmap()
	if m := g.byAddr.Load(); m != nil {
		if id, ok := (*m)[addr]; ok {
			return id.ns, id.labels
		}
	}
	return g.cfg.source(addr)
}

// setWorkloads realizes changed and deleted Workloads (all of the set's
// with all) and swaps in the new lookup map. It costs a copy of the map
// plus the changes: one map entry per address.
func (g *Gateway) setWorkloads(set *catalog.Set, changed []*catalog.Workload, deleted []catalog.Key, all bool) {
	w := &g.rec.workloads
	if all || w.of == nil {
		w.claims, w.of = map[netip.Addr][]catalog.Key{}, map[catalog.Key]*catalog.Workload{}
		changed, deleted = nil, nil
		for _, r := range set.List(catalog.KindWorkload) {
			changed = append(changed, r.(*catalog.Workload))
		}
	} else if len(changed) == 0 && len(deleted) == 0 {
		return
	}
	touched := map[netip.Addr]bool{}
	drop := func(k catalog.Key) {
		old, ok := w.of[k]
		if !ok {
			return
		}
		delete(w.of, k)
		for _, a := range addrsOf(old) {
			touched[a] = true
			if ks := slices.DeleteFunc(w.claims[a], func(x catalog.Key) bool { return x == k }); len(ks) > 0 {
				w.claims[a] = ks
			} else {
				delete(w.claims, a)
			}
		}
	}
	for _, k := range deleted {
		drop(k)
	}
	for _, wl := range changed {
		k := wl.Key()
		drop(k)
		w.of[k] = wl
		for _, a := range addrsOf(wl) {
			touched[a] = true
			w.claims[a] = append(w.claims[a], k)
		}
	}
	m := map[netip.Addr]identity{}
	if old := g.byAddr.Load(); old != nil && !all {
		m = maps.Clone(*old)
	}
	for a := range touched {
		ks := w.claims[a]
		if len(ks) == 0 {
			delete(m, a)
			continue
		}
		win := slices.MinFunc(ks, func(x, y catalog.Key) int {
			return cmp.Or(cmp.Compare(x.Namespace, y.Namespace), cmp.Compare(x.Name, y.Name))
		})
		wl := w.of[win]
		m[a] = identity{ns: wl.Metadata.Namespace, labels: wl.Metadata.Labels}
	}
	g.byAddr.Store(&m)
}

// addrsOf parses a workload's addresses; catalog validation has already
// refused any that do not parse.
func addrsOf(w *catalog.Workload) []netip.Addr {
	out := make([]netip.Addr, 0, len(w.Spec.Addresses))
	for _, s := range w.Spec.Addresses {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// workloadSources is every Workload address as an exact source (a /32 or
// /128) with the namespace and labels of its Workload, in address order:
// the packet mode lists them ahead of the configured sources, the
// precedence source gives them (docs/packet.md, "Workloads").
func (g *Gateway) workloadSources() []packetSourceW {
	m := g.byAddr.Load()
	if m == nil {
		return nil
	}
	addrs := slices.SortedFunc(maps.Keys(*m), func(x, y netip.Addr) int { return x.Compare(y) })
	out := make([]packetSourceW, 0, len(addrs))
	for _, a := range addrs {
		id := (*m)[a]
		out = append(out, packetSourceW{CIDR: netip.PrefixFrom(a, a.BitLen()).String(), Namespace: id.ns, Labels: id.labels})
	}
	return out
}

package topology

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// Plan validates t and resolves it into a Plan. The result depends only on
// t: nodes in file order, LAN links cluster by cluster (each non-gateway node
// to each gateway, in file order), then WAN links in file order; addresses
// follow from those positions.
func (t *Topology) Plan() (*Plan, error) {
	r, err := t.resolve()
	if err != nil {
		return nil, err
	}
	return r.plan(), nil
}

func addrOf(u uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)})
}

// nodeAddr is base + (cluster+1)<<8 + (node+1): the first node of the first
// cluster is 10.200.1.1 with the default addressing.
func (r *resolved) nodeAddr(n nodeRef) netip.Addr {
	return addrOf(r.base + uint32(n.c+1)<<8 + uint32(n.n+1))
}

func (r *resolved) plan() *Plan {
	p := &Plan{Name: r.name, Emulator: r.emulator}
	index := map[nodeRef]int{} // position in p.Nodes
	for ci, c := range r.clusters {
		for ni, n := range c.nodes {
			ref := nodeRef{ci, ni}
			index[ref] = len(p.Nodes)
			p.Nodes = append(p.Nodes, PlanNode{
				ID:                c.name + "/" + n.name,
				Cluster:           c.name,
				Name:              n.name,
				Netns:             Namespace(r.name, c.name, n.name),
				Gateway:           n.gateway,
				Addr:              r.nodeAddr(ref),
				CongestionControl: n.cc,
			})
		}
	}
	for i, l := range r.links {
		a := r.base + linkBase + 2*uint32(i)
		na, nb := &p.Nodes[index[l.a]], &p.Nodes[index[l.b]]
		p.Links = append(p.Links, PlanLink{
			Name:  na.ID + "--" + nb.ID,
			Class: l.class,
			A:     LinkEnd{Node: na.ID, Netns: na.Netns, Device: l.devA, Addr: netip.PrefixFrom(addrOf(a), 31)},
			B:     LinkEnd{Node: nb.ID, Netns: nb.Netns, Device: l.devB, Addr: netip.PrefixFrom(addrOf(a+1), 31)},
			AtoB:  l.em.fwd,
			BtoA:  l.em.rev,
			MTU:   l.mtu,
		})
	}
	r.routes(p, index)
	return p
}

// routes gives every node a /32 route to every other node along shortest
// paths, with one next hop per tying first link (ECMP). Paths are compared
// by hop count first and, among equally short ones, by the number of WAN
// links they cross: a cluster's two gateways then talk over their shared
// LAN neighbour rather than a round trip through a remote gateway, which
// is equally short but crosses an emulated WAN twice.
//
// Routes are per node rather than aggregated per cluster (/24): with several
// gateways, or clusters joined in a line or a mesh, a cluster's nodes need
// not share a first hop, and an aggregate would then be wrong for some of
// them. A lab has at most a few hundred nodes, so the table size is no
// concern, and one rule is correct for any graph.
func (r *resolved) routes(p *Plan, index map[nodeRef]int) {
	adj := r.adjacency()
	refs := make([]nodeRef, len(p.Nodes))
	for ref, i := range index {
		refs[i] = ref
	}
	wanCost := func(e adjEntry) int {
		if r.links[e.link].class == WAN {
			return 1
		}
		return 0
	}
	hops := make(map[nodeRef]int, len(refs))
	wans := make(map[nodeRef]int, len(refs))
	for _, dst := range refs {
		// Breadth-first search from the destination gives every node its
		// hop count to it; a node leaves the queue only after every node one
		// hop closer has, so its fewest-WAN count is final by then.
		clear(hops)
		clear(wans)
		hops[dst], wans[dst] = 0, 0
		queue := []nodeRef{dst}
		for len(queue) > 0 {
			n := queue[0]
			queue = queue[1:]
			for _, e := range adj[n] {
				h, seen := hops[e.peer]
				if !seen {
					hops[e.peer] = hops[n] + 1
					wans[e.peer] = wans[n] + wanCost(e)
					queue = append(queue, e.peer)
				} else if h == hops[n]+1 {
					wans[e.peer] = min(wans[e.peer], wans[n]+wanCost(e))
				}
			}
		}
		dstAddr := p.Nodes[index[dst]].Addr
		for _, src := range refs {
			h, ok := hops[src]
			if src == dst || !ok {
				continue
			}
			var next []NextHop
			for _, e := range adj[src] {
				if hops[e.peer] != h-1 || wans[e.peer]+wanCost(e) != wans[src] {
					continue
				}
				l := p.Links[e.link]
				local, remote := l.A, l.B
				if !e.atA {
					local, remote = l.B, l.A
				}
				next = append(next, NextHop{Via: remote.Addr.Addr(), Device: local.Device})
			}
			slices.SortFunc(next, func(x, y NextHop) int {
				return cmp.Or(x.Via.Compare(y.Via), cmp.Compare(x.Device, y.Device))
			})
			n := &p.Nodes[index[src]]
			n.Routes = append(n.Routes, Route{
				Dst:      netip.PrefixFrom(dstAddr, 32),
				NextHops: next,
				Src:      n.Addr,
			})
		}
	}
	for i := range p.Nodes {
		slices.SortFunc(p.Nodes[i].Routes, func(x, y Route) int {
			return x.Dst.Addr().Compare(y.Dst.Addr())
		})
	}
}

// String renders a route as ip-route(8) arguments ("ip route add " +
// String()), for logs, tests and a builder that shells out.
func (rt Route) String() string {
	s := rt.Dst.String()
	if len(rt.NextHops) == 1 {
		h := rt.NextHops[0]
		return fmt.Sprintf("%s via %s dev %s src %s", s, h.Via, h.Device, rt.Src)
	}
	s += " src " + rt.Src.String()
	for _, h := range rt.NextHops {
		s += fmt.Sprintf(" nexthop via %s dev %s", h.Via, h.Device)
	}
	return s
}

package topology

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/strait-net/strait/lab/emulation"
)

// Node returns the node with the given ID ("cluster/node"). A bare cluster
// name means the cluster's first gateway, as in a WAN link's `between`.
func (p *Plan) Node(id string) (*PlanNode, bool) {
	if !strings.Contains(id, "/") {
		gws := p.Gateways(id)
		if len(gws) == 0 {
			return nil, false
		}
		return gws[0], true
	}
	for i := range p.Nodes {
		if p.Nodes[i].ID == id {
			return &p.Nodes[i], true
		}
	}
	return nil, false
}

// Gateways returns the gateway nodes of a cluster in file order; nil for an
// unknown cluster.
func (p *Plan) Gateways(cluster string) []*PlanNode {
	var gws []*PlanNode
	for i := range p.Nodes {
		if n := &p.Nodes[i]; n.Cluster == cluster && n.Gateway {
			gws = append(gws, n)
		}
	}
	return gws
}

// Emulate sets both directions of every link of the class to e, replacing
// what the topology file gave them. Scenarios use it to impair the LAN and
// the WAN of a lab independently.
func (p *Plan) Emulate(class LinkClass, e emulation.Params) {
	for i := range p.Links {
		if p.Links[i].Class == class {
			p.Links[i].AtoB = e
			p.Links[i].BtoA = e
		}
	}
}

// SetMTU sets the MTU of every link of the class, replacing what the
// topology file gave them; 0 changes nothing.
func (p *Plan) SetMTU(class LinkClass, mtu int) {
	if mtu == 0 {
		return
	}
	for i := range p.Links {
		if p.Links[i].Class == class {
			p.Links[i].MTU = mtu
		}
	}
}

// Link returns the link joining nodes a and b (node IDs), in either
// direction.
func (p *Plan) Link(a, b string) (*PlanLink, bool) {
	for i := range p.Links {
		l := &p.Links[i]
		if l.A.Node == a && l.B.Node == b || l.A.Node == b && l.B.Node == a {
			return l, true
		}
	}
	return nil, false
}

// LinkMTU is l's MTU, DefaultMTU when unset (a plan built by hand).
func (l PlanLink) LinkMTU() int {
	if l.MTU == 0 {
		return DefaultMTU
	}
	return l.MTU
}

// Check reports whether p holds the invariants the builder relies on: node
// IDs, namespaces and addresses are unique; each link joins two known nodes
// with a shared /31 and valid, per-namespace unique device names; every node
// has a route to every other node, from its own address, through next hops
// that are the far ends of its own links. Plans from Topology.Plan always
// pass; Check is for plans built or edited by hand.
func (p *Plan) Check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	nodes := map[string]*PlanNode{}
	netns := map[string]string{}
	addrs := map[netip.Addr]string{}
	useAddr := func(a netip.Addr, who string) {
		if !a.Is4() {
			bad("%s: address %v is not IPv4", who, a)
		}
		if other, dup := addrs[a]; dup {
			bad("%s: address %v is also %s's", who, a, other)
		}
		addrs[a] = who
	}
	for i := range p.Nodes {
		n := &p.Nodes[i]
		if _, dup := nodes[n.ID]; dup {
			bad("node %s: ID used twice", n.ID)
		}
		nodes[n.ID] = n
		if other, dup := netns[n.Netns]; dup {
			bad("node %s: namespace %s is also %s's", n.ID, n.Netns, other)
		}
		netns[n.Netns] = n.ID
		useAddr(n.Addr, "node "+n.ID)
	}

	// far maps (namespace, device) to the address of the link's other end.
	type devKey struct{ netns, dev string }
	far := map[devKey]netip.Addr{}
	for _, l := range p.Links {
		if l.Class != LAN && l.Class != WAN {
			bad("link %s: class %q is not lan or wan", l.Name, l.Class)
		}
		if l.MTU != 0 && (l.MTU < MinMTU || l.MTU > MaxMTU) {
			bad("link %s: MTU %d is not between %d and %d (0: %d)", l.Name, l.MTU, MinMTU, MaxMTU, DefaultMTU)
		}
		for _, e := range []struct{ end, other LinkEnd }{{l.A, l.B}, {l.B, l.A}} {
			n, ok := nodes[e.end.Node]
			switch {
			case !ok:
				bad("link %s: unknown node %q", l.Name, e.end.Node)
			case n.Netns != e.end.Netns:
				bad("link %s: end %s is in namespace %s, not %s", l.Name, e.end.Node, e.end.Netns, n.Netns)
			}
			if e.end.Device == "" || len(e.end.Device) > MaxDeviceBytes {
				bad("link %s: device %q on %s must be 1–%d bytes", l.Name, e.end.Device, e.end.Node, MaxDeviceBytes)
			}
			k := devKey{e.end.Netns, e.end.Device}
			if _, dup := far[k]; dup {
				bad("link %s: device %s is used twice in %s", l.Name, e.end.Device, e.end.Netns)
			}
			far[k] = e.other.Addr.Addr()
			useAddr(e.end.Addr.Addr(), "link "+l.Name+" end "+e.end.Node)
		}
		if l.A.Node == l.B.Node {
			bad("link %s: joins %s to itself", l.Name, l.A.Node)
		}
		if l.A.Addr.Bits() != 31 || l.B.Addr.Bits() != 31 || l.A.Addr.Masked() != l.B.Addr.Masked() {
			bad("link %s: ends %v and %v do not share a /31", l.Name, l.A.Addr, l.B.Addr)
		}
	}

	for i := range p.Nodes {
		n := &p.Nodes[i]
		dsts := map[netip.Addr]bool{}
		for _, rt := range n.Routes {
			if rt.Src != n.Addr {
				bad("node %s: route %v: src %v is not the node's address %v", n.ID, rt.Dst, rt.Src, n.Addr)
			}
			if len(rt.NextHops) == 0 {
				bad("node %s: route %v has no next hop", n.ID, rt.Dst)
			}
			for _, h := range rt.NextHops {
				if via, ok := far[devKey{n.Netns, h.Device}]; !ok || via != h.Via {
					bad("node %s: route %v: next hop %v dev %s is not the far end of a link of the node", n.ID, rt.Dst, h.Via, h.Device)
				}
			}
			if owner, ok := addrs[rt.Dst.Addr()]; rt.Dst.Bits() != 32 || !ok || !strings.HasPrefix(owner, "node ") {
				bad("node %s: route %v is not to a node's /32", n.ID, rt.Dst)
			}
			dsts[rt.Dst.Addr()] = true
		}
		for j := range p.Nodes {
			m := &p.Nodes[j]
			switch {
			case m == n && dsts[m.Addr]:
				bad("node %s: has a route to its own address", n.ID)
			case m != n && !dsts[m.Addr]:
				bad("node %s: no route to %s (%v)", n.ID, m.ID, m.Addr)
			}
		}
		if len(dsts) != len(n.Routes) {
			bad("node %s: several routes to one destination", n.ID)
		}
	}
	return errors.Join(errs...)
}

// Rename gives the plan another lab name, renaming every namespace with it,
// so one topology can be built several times side by side.
func (p *Plan) Rename(name string) {
	p.Name = name
	netns := map[string]string{}
	for i := range p.Nodes {
		n := &p.Nodes[i]
		old := n.Netns
		n.Netns = Namespace(name, n.Cluster, n.Name)
		netns[old] = n.Netns
	}
	for i := range p.Links {
		l := &p.Links[i]
		l.A.Netns, l.B.Netns = netns[l.A.Netns], netns[l.B.Netns]
	}
}

package topology

import (
	"net/netip"

	"github.com/strait-net/strait/lab/emulation"
)

// A Plan is a topology resolved into what the lab builder creates: every
// namespace, every point-to-point link with its addresses and emulation, and
// every route. It holds no decisions left to make, so building it is
// mechanical and the same file always gives the same lab.
type Plan struct {
	Name     string // lab name
	Emulator string // requested emulation backend: "auto", "netem" or "userspace"
	Nodes    []PlanNode
	Links    []PlanLink
}

// PlanNode is one node: a network namespace.
type PlanNode struct {
	ID                string // "cluster/node"
	Cluster           string
	Name              string
	Netns             string     // namespace name, "st-<lab>-<cluster>-<node>"
	Gateway           bool       // the node carries the cluster's WAN links
	Addr              netip.Addr // the node's address, on its loopback device
	CongestionControl string     // TCP congestion control set in the namespace
	Routes            []Route
}

// LinkClass tells intra-cluster links from inter-cluster ones; scenarios
// impair the two classes separately (seed 001's phy and ovl).
type LinkClass string

const (
	LAN LinkClass = "lan" // a node to a gateway of its own cluster
	WAN LinkClass = "wan" // a gateway to a gateway of another cluster
)

// PlanLink is a point-to-point link between two nodes.
type PlanLink struct {
	Name  string // "a/server--a/gw"
	Class LinkClass
	A, B  LinkEnd
	// AtoB impairs packets sent by A (A's egress), BtoA those sent by B. For
	// a LAN link A is the non-gateway node; for a WAN link A is the first
	// node of `between`.
	AtoB, BtoA emulation.Params
	// MTU of both ends' devices, in bytes (DefaultMTU unless the topology
	// or a scenario sets it).
	MTU int
}

// Emulated reports whether either direction of l is impaired.
func (l PlanLink) Emulated() bool { return !l.AtoB.IsZero() || !l.BtoA.IsZero() }

// LinkEnd is one end of a link.
type LinkEnd struct {
	Node   string       // node ID
	Netns  string       // namespace of the node
	Device string       // interface name, unique within the namespace, ≤ 15 bytes
	Addr   netip.Prefix // this end's address, a /31 shared with the other end
}

// Route is one route in a node's namespace.
type Route struct {
	Dst      netip.Prefix
	NextHops []NextHop  // more than one: equal-cost multipath
	Src      netip.Addr // preferred source: the node's address
}

// NextHop is one way towards a route's destination.
type NextHop struct {
	Via    netip.Addr // the other end of the link
	Device string     // the local end's device
}

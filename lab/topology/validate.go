package topology

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/strait-net/strait/lab/emulation"
)

// Limits of the address plan and of Linux. Node addresses take the lower
// half of the /16 (one /24 per cluster, .1–.254 for its nodes), link /31s the
// upper half.
const (
	MaxNameLen     = 8         // lab, cluster and node names
	MaxClusters    = 127       // clusters 1..127 of the lower half of the /16
	MaxNodes       = 254       // per cluster; .0 and .255 stay unused
	MaxLinks       = 128 * 128 // /31s in the upper half of the /16
	MaxDeviceBytes = 15        // IFNAMSIZ - 1
	linkBase       = 128 << 8  // offset of the first link /31 in the /16
	maxPrefixBits  = 16        // the plan needs a whole /16
	namespacePre   = "st-"     // every lab namespace starts with this
)

// resolved is a topology with every default applied and every reference
// looked up. Validate and Plan share it, so what Validate accepts is exactly
// what Plan builds.
type resolved struct {
	name     string
	base     uint32 // first address of the /16
	emulator string
	clusters []rCluster
	links    []rLink // LAN links cluster by cluster, then WAN links in file order
}

type rCluster struct {
	name     string
	nodes    []rNode
	gateways []int // indices into nodes, in file order
	lan      dirs
	mtu      int
}

type rNode struct {
	name    string
	gateway bool
	cc      string
}

type nodeRef struct{ c, n int }

type dirs struct{ fwd, rev emulation.Params }

type rLink struct {
	class      LinkClass
	a, b       nodeRef
	devA, devB string
	em         dirs
	mtu        int
	where      string // field path that caused the link, for error messages
}

// problems collects every error of a topology, each prefixed with the path
// of the field it is about, so one run of Validate shows them all.
type problems []error

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// Validate reports every problem of t, one per line, each naming the field
// (e.g. "clusters[1].nodes[0].name: ...") and the allowed values.
func (t *Topology) Validate() error {
	_, err := t.resolve()
	return err
}

// labelHelp is what a DNS label may contain, for error messages.
var labelHelp = fmt.Sprintf("lowercase letters, digits, '-' not at either end; 1–%d characters", MaxNameLen)

// isLabel reports whether s is an RFC 1123 label of at most MaxNameLen bytes.
func isLabel(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func (p *problems) label(path, s string) bool {
	if isLabel(s) {
		return true
	}
	if s == "" {
		p.add(path, "missing (a DNS label: %s)", labelHelp)
	} else {
		p.add(path, "%q is not a DNS label (%s)", s, labelHelp)
	}
	return false
}

func (p *problems) oneOf(path, s string, allowed []string) bool {
	if slices.Contains(allowed, s) {
		return true
	}
	p.add(path, "%q is not one of %s", s, strings.Join(allowed, ", "))
	return false
}

// parseBase checks the addressing block and returns its first address.
func parseBase(s string) (uint32, error) {
	pfx, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil || !pfx.Addr().Is4() {
		return 0, fmt.Errorf("%q is not an IPv4 prefix (e.g. %s)", s, DefaultAddressing)
	}
	if pfx.Bits() > maxPrefixBits {
		return 0, fmt.Errorf("%s: prefix length must be at most %d (the plan uses a whole /16: node addresses in its lower half, link /31s in its upper half)", pfx, maxPrefixBits)
	}
	if pfx.Masked() != pfx {
		return 0, fmt.Errorf("%s has host bits set; did you mean %s?", pfx, pfx.Masked())
	}
	a := pfx.Addr().As4()
	return uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]), nil
}

// mtu checks a link MTU; 0 takes def.
func (p *problems) mtu(path string, v, def int) int {
	if v == 0 {
		return def
	}
	if v < MinMTU || v > MaxMTU {
		p.add(path, "%d: an MTU must be between %d and %d bytes (absent: %d)", v, MinMTU, MaxMTU, def)
		return def
	}
	return v
}

// specParams resolves an optional spec; nil is a perfect link.
func (p *problems) specParams(path string, s *emulation.Spec) emulation.Params {
	if s == nil {
		return emulation.Params{}
	}
	v, err := s.Params()
	if err != nil {
		p.add(path, "%v", err)
	}
	return v
}

func (p *problems) linkEmulation(path string, le *LinkEmulation) dirs {
	if le == nil {
		return dirs{}
	}
	both := p.specParams(path+".emulation", le.Emulation)
	d := dirs{fwd: both, rev: both}
	if le.Forward != nil {
		d.fwd = p.specParams(path+".forward", le.Forward)
	}
	if le.Reverse != nil {
		d.rev = p.specParams(path+".reverse", le.Reverse)
	}
	return d
}

// resolve applies defaults, looks up references and checks everything.
func (t *Topology) resolve() (*resolved, error) {
	var p problems
	r := &resolved{name: t.Name}
	if p.label("name", t.Name) && strings.Contains(t.Name, "-") {
		// The lab a namespace st-<lab>-<cluster>-<node> belongs to must be
		// readable from the name alone, so that `lab down` finds leftovers.
		p.add("name", "%q: a lab name holds no '-' (lowercase letters and digits, 1–%d characters)", t.Name, MaxNameLen)
	}

	addressing := t.Addressing
	if addressing == "" {
		addressing = DefaultAddressing
	}
	base, err := parseBase(addressing)
	if err != nil {
		p.add("addressing", "%v", err)
	}
	r.base = base

	defaultCC := t.CongestionControl
	if defaultCC == "" {
		defaultCC = DefaultCongestionControl
	} else {
		p.oneOf("congestion-control", defaultCC, CongestionControls)
	}
	r.emulator = t.Emulator
	if r.emulator == "" {
		r.emulator = DefaultEmulator
	} else {
		p.oneOf("emulator", r.emulator, Emulators)
	}

	labMTU := p.mtu("mtu", t.MTU, DefaultMTU)

	switch {
	case len(t.Clusters) == 0:
		p.add("clusters", "a lab needs at least one cluster")
	case len(t.Clusters) > MaxClusters:
		p.add("clusters", "%d clusters; the address plan has room for %d", len(t.Clusters), MaxClusters)
	}
	clusterIdx := map[string]int{}
	netns := map[string]string{} // namespace → node ID, to catch "a-b"/"c" vs "a"/"b-c"
	for ci, c := range t.Clusters {
		path := fmt.Sprintf("clusters[%d]", ci)
		rc := rCluster{name: c.Name}
		if p.label(path+".name", c.Name) {
			if prev, dup := clusterIdx[c.Name]; dup {
				p.add(path+".name", "%q is already the name of clusters[%d]", c.Name, prev)
			} else {
				clusterIdx[c.Name] = ci
			}
		}
		switch {
		case len(c.Nodes) == 0:
			p.add(path+".nodes", "a cluster needs at least one node")
		case len(c.Nodes) > MaxNodes:
			p.add(path+".nodes", "%d nodes; the address plan has room for %d per cluster", len(c.Nodes), MaxNodes)
		}
		nodeIdx := map[string]int{}
		for ni, n := range c.Nodes {
			npath := fmt.Sprintf("%s.nodes[%d]", path, ni)
			if p.label(npath+".name", n.Name) {
				if prev, dup := nodeIdx[n.Name]; dup {
					p.add(npath+".name", "%q is already the name of %s.nodes[%d]", n.Name, path, prev)
				} else {
					nodeIdx[n.Name] = ni
				}
				if isLabel(t.Name) && isLabel(c.Name) {
					ns := Namespace(t.Name, c.Name, n.Name)
					id := c.Name + "/" + n.Name
					if other, dup := netns[ns]; dup && other != id {
						p.add(npath+".name", "namespace %q of %s is also the namespace of %s; rename one of them", ns, id, other)
					}
					netns[ns] = id
				}
			}
			cc := n.CongestionControl
			if cc == "" {
				cc = defaultCC
			} else {
				p.oneOf(npath+".congestion-control", cc, CongestionControls)
			}
			rc.nodes = append(rc.nodes, rNode{name: n.Name, gateway: n.Gateway, cc: cc})
			if n.Gateway {
				rc.gateways = append(rc.gateways, ni)
			}
		}
		if len(rc.gateways) == 0 && len(rc.nodes) > 0 {
			rc.nodes[0].gateway = true
			rc.gateways = []int{0}
		}
		rc.lan = p.linkEmulation(path+".lan", c.LAN)
		rc.mtu = p.mtu(path+".mtu", c.MTU, labMTU)
		r.clusters = append(r.clusters, rc)
	}

	// LAN links: a star around every gateway; each non-gateway node gets one
	// link to each gateway of its cluster.
	for ci, rc := range r.clusters {
		for ni, n := range rc.nodes {
			if n.gateway {
				continue
			}
			for _, gi := range rc.gateways {
				g := rc.nodes[gi]
				r.links = append(r.links, rLink{
					class: LAN,
					a:     nodeRef{ci, ni},
					b:     nodeRef{ci, gi},
					devA:  "lan-" + g.name,
					devB:  "lan-" + n.name,
					em:    rc.lan,
					mtu:   rc.mtu,
					where: fmt.Sprintf("clusters[%d].nodes[%d]", ci, ni),
				})
			}
		}
	}

	// WAN links.
	type pair struct{ x, y nodeRef }
	seenPair := map[pair]int{}
	var wan []rLink
	for wi, w := range t.WAN {
		path := fmt.Sprintf("wan[%d]", wi)
		em := p.linkEmulation(path, &w.LinkEmulation)
		if len(w.Between) != 2 {
			p.add(path+".between", "want two ends, [cluster, cluster] or [cluster/node, cluster/node]; got %d", len(w.Between))
			continue
		}
		var ends [2]nodeRef
		ok := true
		for k, ref := range w.Between {
			end, err := r.lookupGateway(ref, clusterIdx)
			if err != nil {
				p.add(fmt.Sprintf("%s.between[%d]", path, k), "%v", err)
				ok = false
			}
			ends[k] = end
		}
		if !ok {
			continue
		}
		if ends[0].c == ends[1].c {
			p.add(path+".between", "%q and %q are in the same cluster; wan links join different clusters (a cluster's nodes are joined by its lan)", w.Between[0], w.Between[1])
			continue
		}
		key := pair{ends[0], ends[1]}
		if ends[1].c < ends[0].c || ends[1].c == ends[0].c && ends[1].n < ends[0].n {
			key = pair{ends[1], ends[0]}
		}
		if prev, dup := seenPair[key]; dup {
			p.add(path+".between", "%s and %s are already linked by wan[%d]", r.id(ends[0]), r.id(ends[1]), prev)
			continue
		}
		seenPair[key] = wi
		wan = append(wan, rLink{class: WAN, a: ends[0], b: ends[1], em: em, mtu: p.mtu(path+".mtu", w.MTU, labMTU), where: path})
	}
	r.nameWANDevices(wan)
	r.links = append(r.links, wan...)

	if len(r.links) > MaxLinks {
		p.add("wan", "%d links in all; the address plan has room for %d /31s", len(r.links), MaxLinks)
	}
	r.checkDevices(&p)
	if len(p) == 0 {
		r.checkConnected(&p)
	}
	if len(p) > 0 {
		return nil, errors.Join(p...)
	}
	return r, nil
}

// lookupGateway resolves one end of a WAN link.
func (r *resolved) lookupGateway(ref string, clusterIdx map[string]int) (nodeRef, error) {
	cname, nname, hasNode := strings.Cut(ref, "/")
	ci, ok := clusterIdx[cname]
	if !ok {
		return nodeRef{}, fmt.Errorf("unknown cluster %q (clusters: %s)", cname, strings.Join(r.clusterNames(), ", "))
	}
	c := r.clusters[ci]
	if len(c.gateways) == 0 {
		return nodeRef{}, fmt.Errorf("cluster %s has no nodes", cname)
	}
	if !hasNode {
		return nodeRef{ci, c.gateways[0]}, nil
	}
	for ni, n := range c.nodes {
		if n.name != nname {
			continue
		}
		if !n.gateway {
			return nodeRef{}, fmt.Errorf("%s is not a gateway (gateways of %s: %s); mark it gateway: true", ref, cname, strings.Join(r.gatewayNames(ci), ", "))
		}
		return nodeRef{ci, ni}, nil
	}
	return nodeRef{}, fmt.Errorf("unknown node %q in cluster %s (gateways: %s)", nname, cname, strings.Join(r.gatewayNames(ci), ", "))
}

func (r *resolved) clusterNames() []string {
	var names []string
	for _, c := range r.clusters {
		names = append(names, c.name)
	}
	return names
}

func (r *resolved) gatewayNames(ci int) []string {
	var names []string
	for _, gi := range r.clusters[ci].gateways {
		names = append(names, r.clusters[ci].nodes[gi].name)
	}
	return names
}

func (r *resolved) id(n nodeRef) string {
	return r.clusters[n.c].name + "/" + r.clusters[n.c].nodes[n.n].name
}

// nameWANDevices names each end "wan-<peer cluster>", numbered in file
// order ("wan-<peer cluster><k>", k from 1) when the node has several WAN
// links to the same cluster.
func (r *resolved) nameWANDevices(wan []rLink) {
	type key struct {
		node nodeRef
		peer int
	}
	total := map[key]int{}
	for _, l := range wan {
		total[key{l.a, l.b.c}]++
		total[key{l.b, l.a.c}]++
	}
	seen := map[key]int{}
	name := func(node nodeRef, peer int) string {
		k := key{node, peer}
		dev := "wan-" + r.clusters[peer].name
		if total[k] > 1 {
			seen[k]++
			dev += strconv.Itoa(seen[k])
		}
		return dev
	}
	for i := range wan {
		wan[i].devA = name(wan[i].a, wan[i].b.c)
		wan[i].devB = name(wan[i].b, wan[i].a.c)
	}
}

// checkDevices enforces Linux's interface name limit and uniqueness within a
// namespace. Numbered WAN names can collide with a cluster whose name ends
// in digits ("wan-b1" for the first of two links to b, and for the link to
// b1); the file must then rename a cluster.
func (r *resolved) checkDevices(p *problems) {
	type key struct {
		node nodeRef
		dev  string
	}
	used := map[key]string{}
	for _, l := range r.links {
		for _, e := range []struct {
			node nodeRef
			dev  string
		}{{l.a, l.devA}, {l.b, l.devB}} {
			if len(e.dev) > MaxDeviceBytes {
				p.add(l.where, "interface name %q on %s is longer than %d bytes", e.dev, r.id(e.node), MaxDeviceBytes)
			}
			k := key{e.node, e.dev}
			if other, dup := used[k]; dup {
				p.add(l.where, "interface name %q on %s is already used by %s; rename a cluster so wan-<cluster><k> names stay apart", e.dev, r.id(e.node), other)
				continue
			}
			used[k] = l.where
		}
	}
}

// checkConnected requires every node to reach every other, so the plan has
// a route between any two nodes and no experiment silently loses a path.
func (r *resolved) checkConnected(p *problems) {
	adj := r.adjacency()
	start := nodeRef{0, 0}
	seen := map[nodeRef]bool{start: true}
	queue := []nodeRef{start}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, e := range adj[n] {
			if !seen[e.peer] {
				seen[e.peer] = true
				queue = append(queue, e.peer)
			}
		}
	}
	for ci, c := range r.clusters {
		for ni := range c.nodes {
			n := nodeRef{ci, ni}
			if !seen[n] {
				p.add(fmt.Sprintf("clusters[%d].nodes[%d]", ci, ni), "%s cannot reach %s: add a wan link to its cluster's gateways (or a non-gateway node joining its cluster's gateways)", r.id(n), r.id(start))
			}
		}
	}
}

// adjEntry is one link seen from one of its ends.
type adjEntry struct {
	link int
	peer nodeRef
	atA  bool // the node is end A of the link
}

func (r *resolved) adjacency() map[nodeRef][]adjEntry {
	adj := map[nodeRef][]adjEntry{}
	for i, l := range r.links {
		adj[l.a] = append(adj[l.a], adjEntry{link: i, peer: l.b, atA: true})
		adj[l.b] = append(adj[l.b], adjEntry{link: i, peer: l.a, atA: false})
	}
	return adj
}

// Namespace returns the network namespace name of a node.
func Namespace(lab, cluster, node string) string {
	return namespacePre + lab + "-" + cluster + "-" + node
}

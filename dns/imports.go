package dns

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Imports is what the server asks about every query below
// <zone>'s "svc" label. The gateway (or agent) implements it from its catalog
// of ServiceImports.
//
// Contract:
//   - Safe for concurrent use; called on the query path, so it must be cheap
//     (a map look-up, no I/O, no locks held for long).
//   - namespace and name are lowercase RFC 1123 labels (the server lowercases
//     the query and never asks about anything else).
//   - The returned Import and everything it points to must not be modified
//     afterwards: the server reads it without copying. Replace, don't mutate.
//   - Headless imports list only ready endpoints.
//
// An Imports may also implement [NamespaceLister] and [AddrLookup].
type Imports interface {
	LookupImport(namespace, name string) (Import, bool)
}

// NamespaceLister is optionally implemented by an [Imports]. With it, a query
// for <ns>.svc.<zone> of a namespace without imports is NXDOMAIN; without
// it, every such name is treated as an empty non-terminal (NOERROR, no
// answers), because answering NXDOMAIN for a name that has children would let
// resolvers (RFC 8020) hide the services below it.
type NamespaceLister interface {
	HasNamespace(namespace string) bool
}

// ImportType is the MCS ServiceImport type.
type ImportType uint8

const (
	// ClusterSetIP imports have one clusterset IP per address family; DNS
	// answers with those IPs (spec 2.3).
	ClusterSetIP ImportType = iota + 1
	// Headless imports have no clusterset IP; DNS answers with the addresses
	// of their ready endpoints in every cluster (spec 2.4).
	Headless
)

func (t ImportType) String() string {
	switch t {
	case ClusterSetIP:
		return "ClusterSetIP"
	case Headless:
		return "Headless"
	}
	return fmt.Sprintf("ImportType(%d)", uint8(t))
}

// Import is what DNS needs to know about one ServiceImport.
type Import struct {
	Type ImportType
	// IPs are the clusterset IPs of a ClusterSetIP import (at most one per
	// family is usual; all are served). Empty for Headless.
	IPs []netip.Addr
	// Ports of the service. Only named ports get SRV records (spec 2.3.2).
	Ports []Port
	// Endpoints are the ready endpoints of a Headless import, across all
	// clusters. Empty for ClusterSetIP.
	Endpoints []Endpoint
}

// Port is one service port.
type Port struct {
	// Name is the port name: an IANA_SVC_NAME (lowercase letters, digits and
	// '-', at most 15 characters), or empty for an unnamed port.
	Name string
	// Protocol is "TCP", "UDP" or "SCTP".
	Protocol string
	Port     uint16
}

// Endpoint is one ready endpoint of a headless import.
type Endpoint struct {
	// Hostname is the endpoint's hostname (a DNS label). When empty, the
	// server uses its first address with '.' or ':' replaced by '-'
	// (10-3-0-100; IPv6 fully expanded, 2001-0db8-0000-...), as the spec
	// allows a system-assigned identifier.
	Hostname string
	// Cluster is the cluster ID (a DNS label) the endpoint lives in.
	Cluster string
	// Addrs are the endpoint's IPv4 and/or IPv6 addresses; at least one.
	Addrs []netip.Addr
}

// Validate reports the first problem that would make the import's records
// wrong or unservable.
func (imp Import) Validate() error {
	switch imp.Type {
	case ClusterSetIP:
		if len(imp.Endpoints) > 0 {
			return errors.New("endpoints: must be empty for a ClusterSetIP import (they are only served for Headless)")
		}
		for i, ip := range imp.IPs {
			if err := checkAddr(ip); err != nil {
				return fmt.Errorf("ips[%d]: %w", i, err)
			}
		}
	case Headless:
		if len(imp.IPs) > 0 {
			return errors.New("ips: must be empty for a Headless import")
		}
		for i, ep := range imp.Endpoints {
			if !isLabel(ep.Cluster) {
				return fmt.Errorf("endpoints[%d].cluster: %q is not a DNS label (letters, digits, '-', 1-63 characters)", i, ep.Cluster)
			}
			if ep.Hostname != "" && !isLabel(ep.Hostname) {
				return fmt.Errorf("endpoints[%d].hostname: %q is not a DNS label (letters, digits, '-', 1-63 characters) or empty", i, ep.Hostname)
			}
			if len(ep.Addrs) == 0 {
				return fmt.Errorf("endpoints[%d].addrs: empty, need at least one address", i)
			}
			for j, a := range ep.Addrs {
				if err := checkAddr(a); err != nil {
					return fmt.Errorf("endpoints[%d].addrs[%d]: %w", i, j, err)
				}
			}
		}
	default:
		return fmt.Errorf("type: %v is not ClusterSetIP or Headless", imp.Type)
	}
	for i, p := range imp.Ports {
		if p.Name != "" && (!isLabel(p.Name) || len(p.Name) > 15 || p.Name != strings.ToLower(p.Name)) {
			return fmt.Errorf("ports[%d].name: %q is not empty or a port name (lowercase letters, digits, '-', at most 15 characters)", i, p.Name)
		}
		if protoLabel(p.Protocol) == "" {
			return fmt.Errorf("ports[%d].protocol: %q is not TCP, UDP or SCTP", i, p.Protocol)
		}
		if p.Port == 0 {
			return fmt.Errorf("ports[%d].port: 0, need 1-65535", i)
		}
	}
	return nil
}

func checkAddr(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return errors.New("invalid (zero) address")
	case a.Is4In6():
		return fmt.Errorf("%v is IPv4-mapped IPv6; give the IPv4 address", a)
	case a.Zone() != "":
		return fmt.Errorf("%v has a zone; give an address without one", a)
	}
	return nil
}

// protoLabel returns the SRV protocol label ("_tcp") for a Kubernetes
// protocol name, or "" if it has none.
func protoLabel(p string) string {
	switch strings.ToUpper(p) {
	case "TCP":
		return "_tcp"
	case "UDP":
		return "_udp"
	case "SCTP":
		return "_sctp"
	}
	return ""
}

// AddrLookup is optionally implemented by an [Imports] to serve PTR
// records (spec 2.3.3, 2.4.3) for the addresses it knows. Same contract as
// Imports: concurrent, cheap, results not modified afterwards.
type AddrLookup interface {
	// LookupAddr returns the import an address belongs to. An address has at
	// most one owner ("only one PTR record may exist per IP address").
	LookupAddr(addr netip.Addr) (AddrOwner, bool)
}

// AddrOwner names what a clusterset IP or headless endpoint address
// belongs to.
type AddrOwner struct {
	Namespace, Name string
	// Cluster and Hostname are set for a headless endpoint address (Hostname
	// as served, i.e. derived from the address when the endpoint has none),
	// and empty for a clusterset IP.
	Cluster, Hostname string
}

// ImportKey names a ServiceImport.
type ImportKey struct {
	Namespace, Name string
}

// Static is an [Imports] held in memory. It also implements
// [NamespaceLister] and [AddrLookup]. The zero value is empty and ready to
// use.
//
// Changes are made in place under a write lock, so a change costs what it
// changes: a gateway of a large clusterset holds tens of thousands of
// imports and receives them in many batches, and copying the whole table
// on each (as a copy-on-write table did) made every batch cost the size of
// the clusterset. Look-ups take the read lock for one map read; a writer
// holds the lock for its batch only, after validating and copying it.
type Static struct {
	mu         sync.RWMutex
	imports    map[ImportKey]Import
	namespaces map[string]int             // imports per namespace
	addrs      map[netip.Addr][]AddrOwner // claimants, ownerLess first; usually one
}

var (
	_ Imports         = (*Static)(nil)
	_ NamespaceLister = (*Static)(nil)
	_ AddrLookup      = (*Static)(nil)
)

// LookupImport implements [Imports].
func (s *Static) LookupImport(namespace, name string) (Import, bool) {
	if s == nil {
		return Import{}, false
	}
	s.mu.RLock()
	imp, ok := s.imports[ImportKey{namespace, name}]
	s.mu.RUnlock()
	return imp, ok
}

// HasNamespace implements [NamespaceLister].
func (s *Static) HasNamespace(namespace string) bool {
	if s == nil {
		return false
	}
	s.mu.RLock()
	ok := s.namespaces[namespace] > 0
	s.mu.RUnlock()
	return ok
}

// LookupAddr implements [AddrLookup]. An address claimed by several imports
// belongs to the first in (namespace, name, cluster, hostname) order.
func (s *Static) LookupAddr(addr netip.Addr) (AddrOwner, bool) {
	if s == nil {
		return AddrOwner{}, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if cs := s.addrs[addr.Unmap()]; len(cs) > 0 {
		return cs[0], true
	}
	return AddrOwner{}, false
}

// Len returns the number of imports.
func (s *Static) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.imports)
}

// Set replaces all imports. Keys are lowercased. Nothing changes if any
// import is invalid.
func (s *Static) Set(imports map[ImportKey]Import) error {
	m := make(map[ImportKey]Import, len(imports))
	for k, imp := range imports {
		k, imp, err := prepare(k, imp)
		if err != nil {
			return err
		}
		m[k] = imp
	}
	var t Static
	t.init(len(m))
	for k, imp := range m {
		t.putLocked(k, imp)
	}
	s.mu.Lock()
	s.imports, s.namespaces, s.addrs = t.imports, t.namespaces, t.addrs
	s.mu.Unlock()
	return nil
}

// Update adds or replaces the imports of put and removes those of del
// (missing ones are no error), in one step: nothing changes if any import
// of put is invalid. Keys are lowercased; a key in both ends up put. It
// costs what it changes, not the size of the table.
func (s *Static) Update(put map[ImportKey]Import, del []ImportKey) error {
	type kv struct {
		k   ImportKey
		imp Import
	}
	ps := make([]kv, 0, len(put))
	for k, imp := range put {
		k, imp, err := prepare(k, imp)
		if err != nil {
			return err
		}
		ps = append(ps, kv{k, imp})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.imports == nil {
		s.init(len(ps))
	}
	for _, k := range del {
		s.deleteLocked(ImportKey{strings.ToLower(k.Namespace), strings.ToLower(k.Name)})
	}
	for _, p := range ps {
		s.putLocked(p.k, p.imp)
	}
	return nil
}

// Put adds or replaces one import; namespace and name are lowercased.
func (s *Static) Put(namespace, name string, imp Import) error {
	return s.Update(map[ImportKey]Import{{namespace, name}: imp}, nil)
}

// Delete removes one import; deleting a missing one is not an error.
func (s *Static) Delete(namespace, name string) {
	_ = s.Update(nil, []ImportKey{{namespace, name}})
}

func (s *Static) init(n int) {
	s.imports = make(map[ImportKey]Import, n)
	s.namespaces = map[string]int{}
	s.addrs = make(map[netip.Addr][]AddrOwner, n)
}

// putLocked stores a prepared import; s.mu is held (or s is private).
func (s *Static) putLocked(k ImportKey, imp Import) {
	s.deleteLocked(k)
	s.imports[k] = imp
	s.namespaces[k.Namespace]++
	s.claims(k, imp, s.claim)
}

func (s *Static) deleteLocked(k ImportKey) {
	old, ok := s.imports[k]
	if !ok {
		return
	}
	delete(s.imports, k)
	if s.namespaces[k.Namespace]--; s.namespaces[k.Namespace] <= 0 {
		delete(s.namespaces, k.Namespace)
	}
	s.claims(k, old, s.unclaim)
}

// claims calls f with every address an import claims and its owner as
// PTR answers name it.
func (s *Static) claims(k ImportKey, imp Import, f func(netip.Addr, AddrOwner)) {
	for _, ip := range imp.IPs {
		f(ip.Unmap(), AddrOwner{Namespace: k.Namespace, Name: k.Name})
	}
	for _, ep := range imp.Endpoints {
		o := AddrOwner{Namespace: k.Namespace, Name: k.Name, Cluster: ep.Cluster, Hostname: hostname(ep)}
		for _, a := range ep.Addrs {
			f(a.Unmap(), o)
		}
	}
}

// claim adds a claimant in order; an import claiming one address twice
// is there twice, and unclaimed as often.
func (s *Static) claim(a netip.Addr, o AddrOwner) {
	cs := s.addrs[a]
	i := 0
	for i < len(cs) && !ownerLess(o, cs[i]) {
		i++
	}
	s.addrs[a] = slices.Insert(cs, i, o)
}

func (s *Static) unclaim(a netip.Addr, o AddrOwner) {
	cs := s.addrs[a]
	if i := slices.Index(cs, o); i >= 0 {
		cs = slices.Delete(cs, i, i+1)
	}
	if len(cs) == 0 {
		delete(s.addrs, a)
		return
	}
	s.addrs[a] = cs
}

func ownerLess(a, b AddrOwner) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	if a.Cluster != b.Cluster {
		return a.Cluster < b.Cluster
	}
	return a.Hostname < b.Hostname
}

// prepare validates and deep-copies an import so that callers cannot mutate
// what the server reads.
func prepare(k ImportKey, imp Import) (ImportKey, Import, error) {
	k = ImportKey{strings.ToLower(k.Namespace), strings.ToLower(k.Name)}
	if !isLabel(k.Namespace) {
		return k, imp, fmt.Errorf("import %s/%s: namespace: not a DNS label (letters, digits, '-', 1-63 characters)", k.Namespace, k.Name)
	}
	if !isLabel(k.Name) {
		return k, imp, fmt.Errorf("import %s/%s: name: not a DNS label (letters, digits, '-', 1-63 characters)", k.Namespace, k.Name)
	}
	if err := imp.Validate(); err != nil {
		return k, imp, fmt.Errorf("import %s/%s: %w", k.Namespace, k.Name, err)
	}
	cp := Import{Type: imp.Type, IPs: cloneNil(imp.IPs), Ports: cloneNil(imp.Ports)}
	if len(imp.Endpoints) > 0 {
		cp.Endpoints = make([]Endpoint, len(imp.Endpoints))
		for i, ep := range imp.Endpoints {
			ep.Addrs = cloneNil(ep.Addrs)
			cp.Endpoints[i] = ep
		}
	}
	return k, cp, nil
}

func cloneNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return append([]T(nil), s...)
}

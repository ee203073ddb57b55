package packet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/strait-net/strait/ring"
)

// State is everything a gateway node's maps hold, in the form an operator
// (or the lab) writes it for `strait packet apply -f FILE`. Applying a
// State replaces the maps' contents: what it does not list is removed.
//
//	clusters:                  # exporting clusters' gateways (Maglev tables)
//	  - name: b
//	    seed: 0                # ring.Options.Seed; every gateway of a cluster agrees
//	    gateways: {gw-b1: 192.0.2.2, gw-b2: 192.0.2.3}
//	    down: [gw-b2]          # dead gateways: their buckets go to heirs
//	imports:                   # what clients here connect to
//	  - {address: 10.96.0.10, port: 80, protocol: TCP, id: 1, cluster: b}
//	exports:                   # what peers send us, and where it goes
//	  - {address: 10.96.0.10, port: 80, protocol: TCP, id: 1, target: 10.2.0.2:8080}
//	peers:                     # peer gateways' underlay addresses
//	  - {address: 192.0.2.2, cluster: 1}
//	policy:                    # allow rules; anything else is denied
//	  - {cluster: 0, service: 1, prefix: 0.0.0.0/0}
type State struct {
	Clusters []ClusterState `yaml:"clusters"`
	Imports  []ServiceState `yaml:"imports"`
	Exports  []ServiceState `yaml:"exports"`
	Peers    []PeerState    `yaml:"peers"`
	Policy   []PolicyState  `yaml:"policy"`
}

// ClusterState is an exporting cluster's gateways.
type ClusterState struct {
	Name     string            `yaml:"name"`
	Seed     uint64            `yaml:"seed"`
	Gateways map[string]string `yaml:"gateways"`
	Down     []string          `yaml:"down"`
}

// ServiceState is an import (with Cluster) or an export (with Target).
type ServiceState struct {
	Address  string `yaml:"address"`
	Port     uint16 `yaml:"port"`
	Protocol string `yaml:"protocol"`
	ID       uint32 `yaml:"id"`
	Cluster  string `yaml:"cluster"`
	Target   string `yaml:"target"`
}

// PeerState is a peer gateway: tunnel packets from its address are
// accepted, as coming from cluster ID Cluster.
type PeerState struct {
	Address string `yaml:"address"`
	Cluster uint32 `yaml:"cluster"`
	Down    bool   `yaml:"down"`
}

// PolicyState allows new flows from Cluster's (0: this cluster's) clients
// in Prefix to service ID Service; Deny makes it a deny rule, which
// matters only where a longer allowed prefix holds it.
type PolicyState struct {
	Cluster uint32 `yaml:"cluster"`
	Service uint32 `yaml:"service"`
	Prefix  string `yaml:"prefix"`
	Deny    bool   `yaml:"deny"`
}

// maxStateBytes bounds a state file: thousands of services fit easily.
const maxStateBytes = 16 << 20

// ParseState reads a State from YAML, refusing unknown fields, and
// validates it.
func ParseState(r io.Reader) (*State, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxStateBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxStateBytes {
		return nil, fmt.Errorf("state: more than %d bytes", maxStateBytes)
	}
	var s State
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("state: %w", err)
	}
	if _, err := s.compile(); err != nil {
		return nil, err
	}
	return &s, nil
}

// compiled is a State as map contents.
type compiled struct {
	imports map[Service]Import
	exports map[Service]Export
	peers   map[netip.Addr]Peer
	policy  map[PolicyKey]Verdict
	tables  []*ring.Table
	addrs   []map[string]netip.Addr
}

func parseService(field string, s ServiceState) (Service, error) {
	a, err := netip.ParseAddr(s.Address)
	if err != nil || !a.Is4() {
		return Service{}, fmt.Errorf("%s.address %q: want an IPv4 address", field, s.Address)
	}
	if s.Port == 0 {
		return Service{}, fmt.Errorf("%s.port: required, 1..65535", field)
	}
	p, err := ParseProto(s.Protocol)
	if err != nil {
		return Service{}, fmt.Errorf("%s.%w", field, err)
	}
	return Service{a, s.Port, p}, nil
}

func (s *State) compile() (*compiled, error) {
	c := &compiled{
		imports: map[Service]Import{}, exports: map[Service]Export{},
		peers: map[netip.Addr]Peer{}, policy: map[PolicyKey]Verdict{},
	}
	if len(s.Clusters) > maxTables {
		return nil, fmt.Errorf("clusters: %d, at most %d", len(s.Clusters), maxTables)
	}
	index := map[string]int{}
	for i, cl := range s.Clusters {
		field := fmt.Sprintf("clusters[%d]", i)
		if cl.Name == "" {
			return nil, fmt.Errorf("%s.name: required", field)
		}
		if _, dup := index[cl.Name]; dup {
			return nil, fmt.Errorf("%s.name %q: listed twice", field, cl.Name)
		}
		index[cl.Name] = i
		names := make([]string, 0, len(cl.Gateways))
		addrs := map[string]netip.Addr{}
		for name, as := range cl.Gateways {
			a, err := netip.ParseAddr(as)
			if err != nil || !a.Is4() {
				return nil, fmt.Errorf("%s.gateways.%s %q: want an IPv4 address", field, name, as)
			}
			names = append(names, name)
			addrs[name] = a
		}
		slices.Sort(names)
		t, err := ring.New(names, ring.Options{Seed: cl.Seed})
		if err != nil {
			return nil, fmt.Errorf("%s.gateways: %w", field, err)
		}
		down := map[string]bool{}
		for _, d := range cl.Down {
			if _, ok := addrs[d]; !ok {
				return nil, fmt.Errorf("%s.down: %q is not one of its gateways", field, d)
			}
			down[d] = true
		}
		c.tables = append(c.tables, t.WithDown(down))
		c.addrs = append(c.addrs, addrs)
	}
	for i, im := range s.Imports {
		field := fmt.Sprintf("imports[%d]", i)
		svc, err := parseService(field, im)
		if err != nil {
			return nil, err
		}
		if im.Target != "" {
			return nil, fmt.Errorf("%s.target: imports have a cluster, not a target", field)
		}
		t, ok := index[im.Cluster]
		if !ok {
			return nil, fmt.Errorf("%s.cluster %q: not one of clusters[].name", field, im.Cluster)
		}
		if _, dup := c.imports[svc]; dup {
			return nil, fmt.Errorf("%s: %v listed twice", field, svc)
		}
		c.imports[svc] = Import{ID: im.ID, Table: uint32(t)}
	}
	for i, ex := range s.Exports {
		field := fmt.Sprintf("exports[%d]", i)
		svc, err := parseService(field, ex)
		if err != nil {
			return nil, err
		}
		if ex.Cluster != "" {
			return nil, fmt.Errorf("%s.cluster: exports have a target, not a cluster", field)
		}
		target, err := netip.ParseAddrPort(ex.Target)
		if err != nil || !target.Addr().Is4() || target.Port() == 0 {
			return nil, fmt.Errorf("%s.target %q: want IPv4:port", field, ex.Target)
		}
		if _, dup := c.exports[svc]; dup {
			return nil, fmt.Errorf("%s: %v listed twice", field, svc)
		}
		c.exports[svc] = Export{Target: target, ID: ex.ID}
	}
	for i, p := range s.Peers {
		a, err := netip.ParseAddr(p.Address)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("peers[%d].address %q: want an IPv4 address", i, p.Address)
		}
		if _, dup := c.peers[a]; dup {
			return nil, fmt.Errorf("peers[%d].address %v: listed twice", i, a)
		}
		c.peers[a] = Peer{Cluster: p.Cluster, Alive: !p.Down}
	}
	for i, p := range s.Policy {
		pr, err := netip.ParsePrefix(p.Prefix)
		if err != nil || !pr.Addr().Is4() {
			return nil, fmt.Errorf("policy[%d].prefix %q: want an IPv4 prefix such as 10.0.0.0/8", i, p.Prefix)
		}
		k := PolicyKey{Cluster: p.Cluster, Service: p.Service, Prefix: pr.Masked()}
		if _, dup := c.policy[k]; dup {
			return nil, fmt.Errorf("policy[%d]: cluster %d, service %d, prefix %v listed twice", i, p.Cluster, p.Service, k.Prefix)
		}
		c.policy[k] = Verdict{Allow: !p.Deny, Rule: 0}
	}
	return c, nil
}

// Apply makes d's maps hold exactly s. Tables go first and imports last,
// so that no import points at a table not yet written.
func (s *State) Apply(d *Datapath) error {
	c, err := s.compile()
	if err != nil {
		return err
	}
	if len(c.tables) > d.cfg.Tables {
		return fmt.Errorf("clusters: %d, this gateway holds %d tables (Config.Tables)", len(c.tables), d.cfg.Tables)
	}
	for i, t := range c.tables {
		if err := d.SetTable(i, t, c.addrs[i]); err != nil {
			return err
		}
	}
	for i := len(c.tables); i < d.cfg.Tables; i++ {
		if err := d.SetTable(i, nil, nil); err != nil {
			return err
		}
	}
	if err := d.SetPeers(c.peers); err != nil {
		return err
	}
	if err := d.SetPolicy(c.policy); err != nil {
		return err
	}
	if err := d.SetExports(c.exports); err != nil {
		return err
	}
	return d.SetImports(c.imports)
}

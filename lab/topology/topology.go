// Package topology reads a lab's topology file — clusters, their nodes, the
// LAN inside each cluster and the WAN links between clusters — checks it, and
// resolves it into a Plan: the exact namespaces, point-to-point links,
// addresses, interface names, emulation and routes the lab builder creates.
//
// The file format is documented in docs/topology.md. Everything that can be
// decided without touching the kernel is decided here, so the builder stays
// mechanical and two runs of the same file build the same lab.
package topology

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/strait-net/strait/internal/strictyaml"
	"github.com/strait-net/strait/lab/emulation"
)

// Topology is the written form of a lab, as in a topology file.
type Topology struct {
	// Name is the lab name, a DNS label of 1–8 characters; it prefixes every
	// namespace ("st-<lab>-<cluster>-<node>").
	Name string `yaml:"name"`
	// Addressing is the IPv4 block the plan takes its addresses from; only
	// its first /16 is used. Empty means DefaultAddressing.
	Addressing string `yaml:"addressing,omitempty"`
	// CongestionControl is the TCP congestion control of every node that
	// does not set its own. Empty means DefaultCongestionControl.
	CongestionControl string `yaml:"congestion-control,omitempty"`
	// Emulator is the requested emulation backend, one of Emulators. Empty
	// means "auto".
	Emulator string `yaml:"emulator,omitempty"`
	// MTU is the MTU of every link that does not set its own, in bytes.
	// 0 means DefaultMTU.
	MTU      int       `yaml:"mtu,omitempty"`
	Clusters []Cluster `yaml:"clusters"`
	WAN      []WANLink `yaml:"wan,omitempty"`
}

// Cluster is one cluster: a set of nodes joined by a star of LAN links
// around its gateways.
type Cluster struct {
	Name  string `yaml:"name"` // DNS label, 1–8 characters
	Nodes []Node `yaml:"nodes"`
	// LAN impairs every LAN link of the cluster. Forward is the non-gateway
	// node's egress (node → gateway), Reverse the gateway's (gateway → node).
	LAN *LinkEmulation `yaml:"lan,omitempty"`
	// MTU of the cluster's LAN links; 0 means the lab's.
	MTU int `yaml:"mtu,omitempty"`
}

// Node is one node of a cluster; the lab gives it its own network namespace.
type Node struct {
	Name string `yaml:"name"` // DNS label, 1–8 characters
	// Gateway marks a node that carries WAN links. A cluster whose nodes are
	// all unmarked has its first node as its gateway.
	Gateway           bool   `yaml:"gateway,omitempty"`
	CongestionControl string `yaml:"congestion-control,omitempty"` // overrides the lab's
}

// WANLink is a link between gateway nodes of two different clusters.
type WANLink struct {
	// Between names the two ends: "cluster" means the cluster's first
	// gateway, "cluster/node" a particular gateway node. Forward is the
	// first end's egress, Reverse the second's.
	Between []string `yaml:"between"`
	// MTU of the link; 0 means the lab's.
	MTU           int `yaml:"mtu,omitempty"`
	LinkEmulation `yaml:",inline"`
}

// LinkEmulation is the impairment of a link, given for both directions at
// once (Emulation) or per direction. A direction's own spec replaces
// Emulation for that direction entirely; the two are not merged field by
// field, so what a direction gets is always written in one place.
type LinkEmulation struct {
	Emulation *emulation.Spec `yaml:"emulation,omitempty"`
	Forward   *emulation.Spec `yaml:"forward,omitempty"`
	Reverse   *emulation.Spec `yaml:"reverse,omitempty"`
}

// Defaults for the optional top-level fields.
const (
	DefaultAddressing        = "10.200.0.0/16"
	DefaultCongestionControl = "cubic"
	DefaultEmulator          = "auto"
	// DefaultMTU is Ethernet's; MinMTU and MaxMTU bound what a link may
	// set: IPv4's minimum datagram every host must take, and the largest
	// MTU both a veth and strait's userspace emulator carry.
	DefaultMTU = 1500
	MinMTU     = 576
	MaxMTU     = 65000
)

// CongestionControls lists the congestion controls a node may ask for. It
// mirrors net.ipv4.tcp_available_congestion_control on the lab hosts; extend
// it here when a host offers more.
var CongestionControls = []string{"reno", "cubic", "bbr"}

// Emulators lists the accepted emulation backends: "auto" shapes links that
// only cap the rate with the kernel's tbf, carries links with no delay or
// jitter either way in the kernel (loss in a tc program, rate in tbf:
// docs/topology.md, "Accuracy"), and the others with netem when the kernel
// has it and strait's userspace emulator otherwise; "tbf" insists on tbf
// and accepts only rate-only links.
var Emulators = []string{"auto", "netem", "userspace", "tbf"}

// Parse decodes a topology file. Unknown fields, duplicate keys and values
// of the wrong type are errors with line numbers; Parse does not check the
// meaning of the values — call Validate, or Plan, which validates.
func Parse(data []byte) (*Topology, error) {
	var t Topology
	if err := strictyaml.Decode(data, &t); err != nil {
		if errors.Is(err, strictyaml.ErrEmpty) {
			return nil, errors.New("empty topology: want a YAML mapping with name and clusters")
		}
		return nil, friendlyYAMLError(err)
	}
	return &t, nil
}

// Load reads, parses and validates the topology file at path.
func Load(path string) (*Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// yamlTypes names the decoded types for error messages, so a user reads
// "unknown field" with the allowed keys instead of a Go type name.
var yamlTypes = map[string]struct {
	noun string
	typ  reflect.Type
}{
	"topology.Topology": {"the topology", reflect.TypeFor[Topology]()},
	"topology.Cluster":  {"a cluster", reflect.TypeFor[Cluster]()},
	"topology.Node":     {"a node", reflect.TypeFor[Node]()},
	"topology.WANLink":  {"a wan link", reflect.TypeFor[WANLink]()},
	"topology.LinkEmulation": {
		"a link emulation", reflect.TypeFor[LinkEmulation]()},
	"emulation.Spec": {"an emulation spec", reflect.TypeFor[emulation.Spec]()},
}

var unknownFieldRE = regexp.MustCompile(`field (\S+) not found in type (\S+)`)

// friendlyYAMLError rewrites yaml.v3's unknown-field messages, keeping the
// line numbers.
func friendlyYAMLError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = unknownFieldRE.ReplaceAllStringFunc(m, func(s string) string {
			sub := unknownFieldRE.FindStringSubmatch(s)
			t, ok := yamlTypes[sub[2]]
			if !ok {
				return s
			}
			return fmt.Sprintf("unknown field %q in %s (allowed: %s)", sub[1], t.noun, strings.Join(yamlKeys(t.typ), ", "))
		})
	}
	return errors.New(strings.Join(msgs, "\n"))
}

// yamlKeys lists the YAML keys of a struct type, following inline fields.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(opts, "inline") {
			keys = append(keys, yamlKeys(f.Type)...)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		keys = append(keys, name)
	}
	sort.Strings(keys)
	return keys
}

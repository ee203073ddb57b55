// Package scenario names the link conditions an experiment runs under —
// the seed papers' tables of delay, jitter and loss — and applies them to a
// lab plan: one impairment for every LAN link, one for every WAN link, both
// directions alike, as the papers set them on every interface's egress.
package scenario

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/topology"
)

// Scenario is a named pair of impairments. LAN applies to both directions of
// every LAN link, WAN to both directions of every WAN link.
type Scenario struct {
	Name        string // unique across all catalogs, e.g. "edg10"
	Catalog     string // the catalog it comes from, e.g. "seed000"; InlineCatalog for a Spec
	Description string
	LAN, WAN    emulation.Params
	// AsDeclared leaves every link as the topology file declares it.
	AsDeclared bool
	// MTU, when set, is every link's MTU (seed 004 runs its links at
	// 1500 and 9000 bytes).
	MTU int
	// ComposedFrom, set by ComposePath, is the links the scenario defined
	// ("lan …; wan …") before its path was composed onto the WAN link.
	ComposedFrom string
}

// AsDeclared is the scenario that changes nothing: the links keep the
// emulation the topology file gives them, for experiments whose conditions
// live in the topology (e.g. one WAN link at 1 Gbit/s with loss).
const AsDeclared = "as-declared"

var asDeclared = Scenario{Name: AsDeclared, Catalog: "builtin", AsDeclared: true,
	Description: "every link as the topology file declares it"}

// Apply replaces the emulation of every link of p with the scenario's.
func (s Scenario) Apply(p *topology.Plan) {
	if s.AsDeclared {
		return
	}
	p.Emulate(topology.LAN, s.LAN)
	p.Emulate(topology.WAN, s.WAN)
	p.SetMTU(topology.LAN, s.MTU)
	p.SetMTU(topology.WAN, s.MTU)
}

// InlineCatalog is the Catalog of scenarios resolved from a Spec.
const InlineCatalog = "inline"

// Catalogs returns the catalog names, sorted.
func Catalogs() []string {
	names := make([]string, 0, len(catalogs))
	for name := range catalogs {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Catalog returns a catalog's scenarios in the order of the paper's table.
func Catalog(name string) ([]Scenario, error) {
	c, ok := catalogs[name]
	if !ok {
		return nil, fmt.Errorf("unknown scenario catalog %q (catalogs: %s)", name, strings.Join(Catalogs(), ", "))
	}
	return slices.Clone(c), nil
}

// Lookup finds a scenario by name in any catalog.
func Lookup(name string) (Scenario, error) {
	if name == AsDeclared {
		return asDeclared, nil
	}
	for _, c := range Catalogs() {
		for _, s := range catalogs[c] {
			if s.Name == name {
				return s, nil
			}
		}
	}
	return Scenario{}, fmt.Errorf("unknown scenario %q (known: %s, %s)", name, AsDeclared, strings.Join(Names(), ", "))
}

// Names returns every catalog scenario's name, catalog by catalog in table
// order.
func Names() []string {
	var names []string
	for _, c := range Catalogs() {
		for _, s := range catalogs[c] {
			names = append(names, s.Name)
		}
	}
	return names
}

// Spec is the written form of a scenario, for experiment files that bring
// their own conditions:
//
//	name: wan40
//	lan: {delay: 0.5ms}
//	wan: {delay: 20ms, jitter: 4ms, loss: 0.1%}
//	mtu: 9000                       # every link's; absent: the topology's
type Spec struct {
	Name string         `yaml:"name" json:"name"`
	LAN  emulation.Spec `yaml:"lan,omitempty" json:"lan,omitempty"`
	WAN  emulation.Spec `yaml:"wan,omitempty" json:"wan,omitempty"`
	MTU  int            `yaml:"mtu,omitempty" json:"mtu,omitempty"`
}

// nameRE keeps scenario names usable as file and column names in results;
// '.' is allowed because the papers use it ("edg2.5").
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,31}$`)

// Resolve checks s and returns its Scenario. Its name must not be a catalog
// scenario's, so a result labelled "edg10" always means the paper's edg10.
func (s Spec) Resolve() (Scenario, error) {
	if !nameRE.MatchString(s.Name) {
		return Scenario{}, fmt.Errorf("name: %q is not a scenario name (1–32 lowercase letters, digits, '.', '_', '-', starting with a letter or digit)", s.Name)
	}
	if c, err := Lookup(s.Name); err == nil {
		return Scenario{}, fmt.Errorf("name: %q is a scenario of catalog %s; give an inline scenario another name", s.Name, c.Catalog)
	}
	lan, err := s.LAN.Params()
	if err != nil {
		return Scenario{}, fmt.Errorf("lan: %w", err)
	}
	wan, err := s.WAN.Params()
	if err != nil {
		return Scenario{}, fmt.Errorf("wan: %w", err)
	}
	desc := fmt.Sprintf("inline: lan %v; wan %v", lan, wan)
	if s.MTU != 0 {
		if s.MTU < topology.MinMTU || s.MTU > topology.MaxMTU {
			return Scenario{}, fmt.Errorf("mtu %d: must be between %d and %d bytes (absent: the topology's)", s.MTU, topology.MinMTU, topology.MaxMTU)
		}
		desc += fmt.Sprintf("; every link's MTU %d", s.MTU)
	}
	return Scenario{
		Name:        s.Name,
		Catalog:     InlineCatalog,
		Description: desc,
		LAN:         lan,
		WAN:         wan,
		MTU:         s.MTU,
	}, nil
}

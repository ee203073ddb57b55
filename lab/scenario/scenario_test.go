package scenario

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/topology"
)

// referenceFile is the shared transcription of the papers' tables.
const referenceFile = "../../../shared/reference/seed-scenarios.yaml"

type refImp struct {
	DelayMs  float64 `yaml:"delay_ms"`
	JitterMs float64 `yaml:"jitter_ms"`
	LossPct  float64 `yaml:"loss_pct"`
}

func loadReference(t *testing.T) (seed000 map[string]refImp, seed001 map[string]struct{ Phy, Ovl refImp }) {
	t.Helper()
	data, err := os.ReadFile(referenceFile)
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s not found", referenceFile)
	}
	if err != nil {
		t.Fatal(err)
	}
	blocks := scenarioBlocks(string(data))
	if err := yaml.Unmarshal([]byte(blocks["seed000_table_iv"]), &seed000); err != nil {
		t.Fatalf("seed000_table_iv.scenarios: %v", err)
	}
	var ref001 map[string]struct {
		Phy refImp `yaml:"phy"`
		Ovl refImp `yaml:"ovl"`
	}
	if err := yaml.Unmarshal([]byte(blocks["seed001_table_2"]), &ref001); err != nil {
		t.Fatalf("seed001_table_2.scenarios: %v", err)
	}
	seed001 = map[string]struct{ Phy, Ovl refImp }{}
	for k, v := range ref001 {
		seed001[k] = struct{ Phy, Ovl refImp }{v.Phy, v.Ovl}
	}
	return seed000, seed001
}

// scenarioBlocks cuts the "scenarios:" mapping out of each top-level
// section. The reference file as a whole is not valid YAML (seed001's "phy:
// ...; ovl: ..." note is a plain scalar containing ": "), so the test reads
// only the blocks it checks instead of depending on the notes around them.
func scenarioBlocks(text string) map[string]string {
	blocks := map[string]string{}
	section, in := "", false
	for _, line := range strings.Split(text, "\n") {
		indent := len(line) - len(strings.TrimLeft(line, " "))
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
		case indent == 0:
			section, _, _ = strings.Cut(trimmed, ":")
			in = false
		case indent == 2:
			in = strings.HasPrefix(trimmed, "scenarios:")
		case in:
			blocks[section] += line + "\n"
		}
	}
	return blocks
}

// matches compares a catalog value with the paper's, in the paper's units.
func matches(t *testing.T, what string, got emulation.Params, want refImp) {
	t.Helper()
	msOf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if msOf(got.Delay) != want.DelayMs || msOf(got.Jitter) != want.JitterMs || got.Loss != want.LossPct {
		t.Errorf("%s: %v, paper says delay %vms jitter %vms loss %v%%", what, got, want.DelayMs, want.JitterMs, want.LossPct)
	}
	if got.Dist() != emulation.Uniform || got.Rate != 0 || got.Limit != 0 || got.LossCorrelation != 0 || got.Reorder {
		t.Errorf("%s: %v sets more than delay, uniform jitter and loss", what, got)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

func TestCatalogsMatchReference(t *testing.T) {
	ref000, ref001 := loadReference(t)
	c, err := Catalog("seed000")
	if err != nil {
		t.Fatal(err)
	}
	if len(c) != len(ref000) || len(ref000) == 0 {
		t.Errorf("seed000 has %d scenarios, the reference %d", len(c), len(ref000))
	}
	for _, s := range c {
		want, ok := ref000[s.Name]
		if !ok {
			t.Errorf("seed000 %s is not in the reference", s.Name)
			continue
		}
		matches(t, "seed000 "+s.Name+" lan", s.LAN, want)
		matches(t, "seed000 "+s.Name+" wan", s.WAN, want)
	}
	c, err = Catalog("seed001")
	if err != nil {
		t.Fatal(err)
	}
	if len(c) != len(ref001) || len(ref001) == 0 {
		t.Errorf("seed001 has %d scenarios, the reference %d", len(c), len(ref001))
	}
	for _, s := range c {
		want, ok := ref001[s.Name]
		if !ok {
			t.Errorf("seed001 %s is not in the reference", s.Name)
			continue
		}
		matches(t, "seed001 "+s.Name+" lan (phy)", s.LAN, want.Phy)
		matches(t, "seed001 "+s.Name+" wan (ovl)", s.WAN, want.Ovl)
	}
}

func TestCatalogOrderAndNames(t *testing.T) {
	if got := strings.Join(Catalogs(), ","); got != "seed000,seed001" {
		t.Errorf("Catalogs() = %s", got)
	}
	want := map[string]string{
		"seed000": "lcl,edg2.5,edg5,edg10,edg15,edg20",
		"seed001": "local,edge5,edge10,edge20,edge30,cloud5,cloud10,cloud20,cloud30",
	}
	seen := map[string]string{}
	for _, name := range Catalogs() {
		c, err := Catalog(name)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range c {
			names = append(names, s.Name)
			if s.Catalog != name {
				t.Errorf("%s: Catalog %q, want %q", s.Name, s.Catalog, name)
			}
			if s.Description == "" {
				t.Errorf("%s: no description", s.Name)
			}
			if other, dup := seen[s.Name]; dup {
				t.Errorf("scenario %s is in catalogs %s and %s; names must be unique", s.Name, other, name)
			}
			seen[s.Name] = name
			if !nameRE.MatchString(s.Name) {
				t.Errorf("catalog scenario name %q would be rejected in a Spec", s.Name)
			}
			got, err := Lookup(s.Name)
			if err != nil || got != s {
				t.Errorf("Lookup(%s) = %v, %v", s.Name, got, err)
			}
		}
		if got := strings.Join(names, ","); got != want[name] {
			t.Errorf("%s: %s, want %s", name, got, want[name])
		}
	}
}

func TestLookupErrors(t *testing.T) {
	_, err := Lookup("edge15")
	if err == nil || !strings.Contains(err.Error(), `unknown scenario "edge15"`) || !strings.Contains(err.Error(), "edg15") || !strings.Contains(err.Error(), "cloud30") {
		t.Errorf("Lookup(edge15) error %v; want it to list the known names", err)
	}
	_, err = Catalog("seed002")
	if err == nil || !strings.Contains(err.Error(), "seed000, seed001") {
		t.Errorf("Catalog(seed002) error %v", err)
	}
	// Catalog returns a copy: editing it does not change the catalog.
	c, _ := Catalog("seed000")
	c[0].Name = "changed"
	if s, err := Lookup("lcl"); err != nil || s.Name != "lcl" {
		t.Errorf("catalog changed through Catalog's result")
	}
}

func TestApply(t *testing.T) {
	topo, err := topology.Load("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"edg10", "cloud20", "local"} {
		t.Run(name, func(t *testing.T) {
			s, err := Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			p, err := topo.Plan()
			if err != nil {
				t.Fatal(err)
			}
			s.Apply(p)
			lan, wan := 0, 0
			for _, l := range p.Links {
				want := s.LAN
				if l.Class == topology.WAN {
					want = s.WAN
					wan++
				} else {
					lan++
				}
				if l.AtoB != want || l.BtoA != want {
					t.Errorf("%s (%s): %v / %v, want %v both ways", l.Name, l.Class, l.AtoB, l.BtoA, want)
				}
			}
			if lan == 0 || wan == 0 {
				t.Fatalf("quickstart has %d lan and %d wan links", lan, wan)
			}
		})
	}
}

func TestSpecResolve(t *testing.T) {
	var spec Spec
	src := "name: wan40\nlan: {delay: 0.5ms}\nwan: {delay: 20ms, jitter: 4ms, loss: 0.1%}\n"
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&spec); err != nil {
		t.Fatal(err)
	}
	s, err := spec.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "wan40" || s.Catalog != InlineCatalog || s.LAN.Delay != 500*time.Microsecond ||
		s.WAN.Delay != 20*time.Millisecond || s.WAN.Jitter != 4*time.Millisecond || math.Abs(s.WAN.Loss-0.1) > 0 {
		t.Errorf("Resolve() = %+v", s)
	}

	for _, tc := range []struct {
		name string
		spec Spec
		want string
	}{
		{"no name", Spec{}, `name: "" is not a scenario name`},
		{"bad name", Spec{Name: "Edge 5"}, `name: "Edge 5" is not a scenario name`},
		{"catalog name", Spec{Name: "edg10"}, `name: "edg10" is a scenario of catalog seed000`},
		{"bad lan", Spec{Name: "x", LAN: emulation.Spec{Delay: "fast"}}, `lan: delay: "fast" is not a duration`},
		{"bad wan", Spec{Name: "x", WAN: emulation.Spec{Loss: "200%"}}, "wan: loss 200%: must be between"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.spec.Resolve()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Resolve() error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCatalogSpecRoundTrip(t *testing.T) {
	// A catalog scenario written out as a Spec (under another name) resolves
	// to the same values, so experiment files can start from a catalog row.
	for _, name := range Names() {
		s, _ := Lookup(name)
		got, err := Spec{Name: "copy", LAN: s.LAN.Spec(), WAN: s.WAN.Spec()}.Resolve()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.LAN != s.LAN || got.WAN != s.WAN {
			t.Errorf("%s: round trip %v/%v, want %v/%v", name, got.LAN, got.WAN, s.LAN, s.WAN)
		}
	}
}

func TestAsDeclaredKeepsTopologyEmulation(t *testing.T) {
	topo, err := topology.Parse([]byte("name: x\nclusters:\n  - {name: a, nodes: [{name: g}]}\n  - {name: b, nodes: [{name: g}]}\nwan:\n  - between: [a, b]\n    emulation: {delay: 5ms, loss: 0.08%}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := topo.Plan()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Lookup(AsDeclared)
	if err != nil {
		t.Fatal(err)
	}
	sc.Apply(p)
	if got := p.Links[0].AtoB; got.Delay != 5*time.Millisecond || got.Loss != 0.08 {
		t.Errorf("as-declared changed the WAN link to %v", got)
	}
}

package topology

import (
	"strings"
	"testing"
)

// base is a valid two-cluster topology; cases append to or replace it.
const twoClusters = `
name: qs
clusters:
  - name: a
    nodes: [{name: gw, gateway: true}, {name: server}]
  - name: b
    nodes: [{name: gw, gateway: true}, {name: client}]
wan:
  - between: [a, b]
`

func TestValidateErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string // substrings of the error, in particular the field path
	}{
		{"no name", "clusters: [{name: a, nodes: [{name: n}]}]", []string{"name: missing (a DNS label"}},
		{"bad lab name", "name: Lab\nclusters: [{name: a, nodes: [{name: n}]}]", []string{`name: "Lab" is not a DNS label`}},
		{"long lab name", "name: abcdefghi\nclusters: [{name: a, nodes: [{name: n}]}]", []string{`name: "abcdefghi" is not a DNS label`, "1–8 characters"}},
		{"no clusters", "name: x", []string{"clusters: a lab needs at least one cluster"}},
		{"empty clusters", "name: x\nclusters: []", []string{"clusters: a lab needs at least one cluster"}},
		{"bad node name", "name: x\nclusters: [{name: a, nodes: [{name: n}]}, {name: b, nodes: [{name: Gw!}]}]",
			[]string{`clusters[1].nodes[0].name: "Gw!" is not a DNS label (lowercase letters, digits, '-'`}},
		{"leading dash", "name: x\nclusters: [{name: -a, nodes: [{name: n}]}]", []string{`clusters[0].name: "-a" is not a DNS label`}},
		{"duplicate cluster", "name: x\nclusters: [{name: a, nodes: [{name: n}]}, {name: a, nodes: [{name: n}]}]",
			[]string{`clusters[1].name: "a" is already the name of clusters[0]`}},
		{"duplicate node", "name: x\nclusters: [{name: a, nodes: [{name: n}, {name: m}, {name: n}]}]",
			[]string{`clusters[0].nodes[2].name: "n" is already the name of clusters[0].nodes[0]`}},
		{"no nodes", "name: x\nclusters: [{name: a}]", []string{"clusters[0].nodes: a cluster needs at least one node"}},
		{"namespace clash", "name: x\nclusters: [{name: a-b, nodes: [{name: c}]}, {name: a, nodes: [{name: b-c}]}]\nwan: [{between: [a-b, a]}]",
			[]string{`clusters[1].nodes[0].name: namespace "st-x-a-b-c" of a/b-c is also the namespace of a-b/c`}},
		{"bad congestion control", "name: x\ncongestion-control: vegas\nclusters: [{name: a, nodes: [{name: n}]}]",
			[]string{`congestion-control: "vegas" is not one of reno, cubic, bbr`}},
		{"bad node congestion control", "name: x\nclusters: [{name: a, nodes: [{name: n, congestion-control: BBR}]}]",
			[]string{`clusters[0].nodes[0].congestion-control: "BBR" is not one of reno, cubic, bbr`}},
		{"bad emulator", "name: x\nemulator: tc\nclusters: [{name: a, nodes: [{name: n}]}]",
			[]string{`emulator: "tc" is not one of auto, netem, userspace`}},
		{"addressing not a prefix", "name: x\naddressing: 10.200.0.0\nclusters: [{name: a, nodes: [{name: n}]}]",
			[]string{`addressing: "10.200.0.0" is not an IPv4 prefix`}},
		{"addressing ipv6", "name: x\naddressing: fd00::/16\nclusters: [{name: a, nodes: [{name: n}]}]",
			[]string{`addressing: "fd00::/16" is not an IPv4 prefix`}},
		{"addressing too long", "name: x\naddressing: 10.200.0.0/24\nclusters: [{name: a, nodes: [{name: n}]}]",
			[]string{"addressing: 10.200.0.0/24: prefix length must be at most 16"}},
		{"addressing host bits", "name: x\naddressing: 10.200.1.0/16\nclusters: [{name: a, nodes: [{name: n}]}]",
			[]string{"addressing: 10.200.1.0/16 has host bits set; did you mean 10.200.0.0/16?"}},
		{"lan emulation", "name: x\nclusters: [{name: a, nodes: [{name: n}], lan: {emulation: {delay: 5}}}]",
			[]string{`clusters[0].lan.emulation: delay: "5" is not a duration`}},
		{"lan reverse", "name: x\nclusters: [{name: a, nodes: [{name: n}], lan: {reverse: {loss: 101%}}}]",
			[]string{`clusters[0].lan.reverse: loss 101%: must be between`}},
		{"lab mtu too small", "name: x\nmtu: 500\nclusters: [{name: a, nodes: [{name: n}]}]",
			[]string{"mtu: 500: an MTU must be between 576 and 65000 bytes (absent: 1500)"}},
		{"cluster mtu too large", "name: x\nclusters: [{name: a, nodes: [{name: n}], mtu: 65536}]",
			[]string{"clusters[0].mtu: 65536: an MTU must be between 576 and 65000"}},
		{"wan mtu negative", twoClusters + "    mtu: -1\n", []string{"wan[0].mtu: -1: an MTU must be between"}},
		{"wan emulation", twoClusters + "    emulation: {rate: 10}\n", []string{`wan[0].emulation: rate: "10" is not a rate`}},
		{"wan forward", twoClusters + "    forward: {distribution: normal}\n", []string{`wan[0].forward: distribution "normal": needs a jitter`}},
		{"wan unknown cluster", twoClusters + "  - between: [a, c]\n", []string{`wan[1].between[1]: unknown cluster "c" (clusters: a, b)`}},
		{"wan unknown node", twoClusters + "  - between: [a/gw2, b]\n", []string{`wan[1].between[0]: unknown node "gw2" in cluster a (gateways: gw)`}},
		{"wan not a gateway", twoClusters + "  - between: [a/server, b]\n", []string{`wan[1].between[0]: a/server is not a gateway (gateways of a: gw); mark it gateway: true`}},
		{"wan same cluster", twoClusters + "  - between: [a, a/gw]\n", []string{`wan[1].between: "a" and "a/gw" are in the same cluster`}},
		{"wan duplicate", twoClusters + "  - between: [b/gw, a]\n", []string{"wan[1].between: b/gw and a/gw are already linked by wan[0]"}},
		{"wan one end", twoClusters + "  - between: [a]\n", []string{"wan[1].between: want two ends", "got 1"}},
		{"disconnected", "name: x\nclusters: [{name: a, nodes: [{name: n}]}, {name: b, nodes: [{name: n}]}]",
			[]string{"clusters[1].nodes[0]: b/n cannot reach a/n"}},
		{"lonely second gateway", "name: x\nclusters: [{name: a, nodes: [{name: g1, gateway: true}, {name: g2, gateway: true}]}, {name: b, nodes: [{name: n}]}]\nwan: [{between: [a/g1, b]}]",
			[]string{"clusters[0].nodes[1]: a/g2 cannot reach a/g1"}},
		{"device clash", `
name: x
clusters:
  - {name: a, nodes: [{name: gw}]}
  - {name: b, nodes: [{name: x, gateway: true}, {name: y, gateway: true}, {name: n}]}
  - {name: b1, nodes: [{name: gw}]}
wan:
  - between: [a, b/x]
  - between: [a, b/y]
  - between: [a, b1]
`, []string{`wan[2]: interface name "wan-b1" on a/gw is already used by wan[0]`}},
		{"several problems at once", "name: X\nemulator: tc\nclusters: [{name: a, nodes: [{name: N}]}]",
			[]string{`name: "X"`, `emulator: "tc"`, `clusters[0].nodes[0].name: "N"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := Parse([]byte(tc.src))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			err = topo.Validate()
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			if _, perr := topo.Plan(); perr == nil || perr.Error() != err.Error() {
				t.Errorf("Plan error %v, want the Validate error", perr)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"empty", "", []string{"empty topology"}},
		{"unknown top-level field", "name: x\nclusterz: []\n", []string{"line 2", `unknown field "clusterz" in the topology`, "allowed: addressing, clusters, congestion-control, emulator, mtu, name, wan"}},
		{"unknown node field", "name: x\nclusters:\n  - name: a\n    nodes: [{name: n, gatway: true}]\n", []string{"line 4", `unknown field "gatway" in a node`}},
		{"unknown emulation field", "name: x\nclusters: [{name: a, nodes: [{name: n}], lan: {emulation: {dealy: 1ms}}}]\n", []string{"line 2", `unknown field "dealy" in an emulation spec`, "loss-correlation"}},
		{"unknown wan field", "name: x\nwan: [{between: [a, b], emulaton: {}}]\n", []string{"line 2", `unknown field "emulaton" in a wan link`, "allowed: between, emulation, forward, mtu, reverse"}},
		{"wrong type", "name: x\nclusters: [{name: a, nodes: [{name: n, gateway: maybe}]}]\n", []string{"line 2", "bool"}},
		{"duplicate key", "name: x\nname: y\n", []string{"already defined"}},
		{"two documents", "name: x\n---\nname: y\n", []string{"more than one YAML document"}},
		{"not a mapping", "- a\n- b\n", []string{"line 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src))
			if err == nil {
				t.Fatal("Parse accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestParseScalarsIntoStrings(t *testing.T) {
	// YAML reads 0 and 0.08 as numbers; the spec's string fields take them.
	topo, err := Parse([]byte("name: x\nclusters: [{name: a, nodes: [{name: n}, {name: m}], lan: {emulation: {delay: 0, loss: 0.08}}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := topo.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Links[0].AtoB.Loss; got != 0.08 {
		t.Errorf("loss %v", got)
	}
}

func TestLoad(t *testing.T) {
	if _, err := Load("../../examples/quickstart.yaml"); err != nil {
		t.Fatal(err)
	}
	_, err := Load("testdata/does-not-exist.yaml")
	if err == nil || !strings.Contains(err.Error(), "does-not-exist.yaml") {
		t.Errorf("Load of a missing file: %v", err)
	}
}

func TestCheckDevicesLength(t *testing.T) {
	// Names are at most 8 bytes, so real topologies never exceed the limit;
	// the check guards future naming changes.
	r := &resolved{
		clusters: []rCluster{{name: "a", nodes: []rNode{{name: "n"}}}, {name: "b", nodes: []rNode{{name: "m"}}}},
		links:    []rLink{{class: WAN, a: nodeRef{0, 0}, b: nodeRef{1, 0}, devA: "wan-abcdefghijkl", devB: "wan-a", where: "wan[0]"}},
	}
	var p problems
	r.checkDevices(&p)
	if len(p) != 1 || !strings.Contains(p[0].Error(), `wan[0]: interface name "wan-abcdefghijkl" on a/n is longer than 15 bytes`) {
		t.Errorf("problems %v", p)
	}
}

// TestMTU: the lab's MTU is every link's default, a cluster's replaces it
// for its LAN links and a WAN link's for itself.
func TestMTU(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src      string
		lan, wan int
	}{
		{"default", twoClusters, DefaultMTU, DefaultMTU},
		{"lab", strings.Replace(twoClusters, "name: qs\n", "name: qs\nmtu: 9000\n", 1), 9000, 9000},
		{"wan only", twoClusters + "    mtu: 9000\n", DefaultMTU, 9000},
		{"cluster and wan", strings.Replace(twoClusters, "name: qs\n", "name: qs\nmtu: 4000\n", 1) + "    mtu: 9000\n", 4000, 9000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := Parse([]byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			p, err := topo.Plan()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range p.Links {
				want := tc.lan
				if l.Class == WAN {
					want = tc.wan
				}
				if l.MTU != want {
					t.Errorf("link %s (%s): MTU %d, want %d", l.Name, l.Class, l.MTU, want)
				}
			}
			p.SetMTU(LAN, 1400)
			if l, ok := p.Link("a/server", "a/gw"); !ok || l.MTU != 1400 {
				t.Errorf("after SetMTU(LAN, 1400): %+v", l)
			}
		})
	}
}

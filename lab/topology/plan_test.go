package topology

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/lab/emulation"
)

// mustPlan parses, plans and checks the plan's invariants.
func mustPlan(t *testing.T, src string) *Plan {
	t.Helper()
	topo, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	p, err := topo.Plan()
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	if err := p.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	again, err := topo.Plan()
	if err != nil || !reflect.DeepEqual(p, again) {
		t.Fatalf("Plan is not deterministic")
	}
	return p
}

// routesOf renders a node's routes as ip-route arguments.
func routesOf(t *testing.T, p *Plan, id string) []string {
	t.Helper()
	n, ok := p.Node(id)
	if !ok {
		t.Fatalf("no node %s", id)
	}
	var out []string
	for _, r := range n.Routes {
		out = append(out, r.String())
	}
	return out
}

func linkSummary(l PlanLink) string {
	return string(l.Class) + " " + l.A.Node + " " + l.A.Device + " " + l.A.Addr.String() +
		" | " + l.B.Node + " " + l.B.Device + " " + l.B.Addr.String()
}

type wantPlan struct {
	nodes  map[string]string   // ID → address
	links  []string            // linkSummary, in order
	routes map[string][]string // ID → routes, in order
}

func (w wantPlan) check(t *testing.T, p *Plan) {
	t.Helper()
	if len(p.Nodes) != len(w.nodes) {
		t.Errorf("%d nodes, want %d", len(p.Nodes), len(w.nodes))
	}
	for id, addr := range w.nodes {
		n, ok := p.Node(id)
		if !ok {
			t.Errorf("node %s missing", id)
			continue
		}
		if n.Addr.String() != addr {
			t.Errorf("node %s: addr %v, want %s", id, n.Addr, addr)
		}
	}
	var links []string
	for _, l := range p.Links {
		links = append(links, linkSummary(l))
	}
	if !reflect.DeepEqual(links, w.links) {
		t.Errorf("links:\n%s\nwant:\n%s", strings.Join(links, "\n"), strings.Join(w.links, "\n"))
	}
	for id, want := range w.routes {
		if got := routesOf(t, p, id); !reflect.DeepEqual(got, want) {
			t.Errorf("routes of %s:\n%s\nwant:\n%s", id, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func TestPlanQuickstart(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, string(data))
	if p.Name != "qs" || p.Emulator != "auto" {
		t.Errorf("name %q emulator %q", p.Name, p.Emulator)
	}
	wantPlan{
		nodes: map[string]string{"a/gw": "10.200.1.1", "a/server": "10.200.1.2", "b/gw": "10.200.2.1", "b/client": "10.200.2.2"},
		links: []string{
			"lan a/server lan-gw 10.200.128.0/31 | a/gw lan-server 10.200.128.1/31",
			"lan b/client lan-gw 10.200.128.2/31 | b/gw lan-client 10.200.128.3/31",
			"wan a/gw wan-b 10.200.128.4/31 | b/gw wan-a 10.200.128.5/31",
		},
		routes: map[string][]string{
			"a/server": {
				"10.200.1.1/32 via 10.200.128.1 dev lan-gw src 10.200.1.2",
				"10.200.2.1/32 via 10.200.128.1 dev lan-gw src 10.200.1.2",
				"10.200.2.2/32 via 10.200.128.1 dev lan-gw src 10.200.1.2",
			},
			"a/gw": {
				"10.200.1.2/32 via 10.200.128.0 dev lan-server src 10.200.1.1",
				"10.200.2.1/32 via 10.200.128.5 dev wan-b src 10.200.1.1",
				"10.200.2.2/32 via 10.200.128.5 dev wan-b src 10.200.1.1",
			},
			"b/client": {
				"10.200.1.1/32 via 10.200.128.3 dev lan-gw src 10.200.2.2",
				"10.200.1.2/32 via 10.200.128.3 dev lan-gw src 10.200.2.2",
				"10.200.2.1/32 via 10.200.128.3 dev lan-gw src 10.200.2.2",
			},
		},
	}.check(t, p)

	server, _ := p.Node("a/server")
	if server.Netns != "st-qs-a-server" || server.CongestionControl != "bbr" || server.Gateway {
		t.Errorf("a/server: %+v", server)
	}
	if gw, _ := p.Node("a/gw"); gw.CongestionControl != "cubic" || !gw.Gateway {
		t.Errorf("a/gw: %+v", gw)
	}
	if n, ok := p.Node("b"); !ok || n.ID != "b/gw" {
		t.Errorf(`Node("b") = %v, %v; want b/gw`, n, ok)
	}
	if _, ok := p.Node("c/gw"); ok {
		t.Error(`Node("c/gw") found`)
	}
	lan := emulation.Params{Delay: time.Millisecond}
	if l := p.Links[0]; l.AtoB != lan || l.BtoA != lan || p.Links[1].Emulated() {
		t.Errorf("lan emulation: %v / %v, b's lan %v", l.AtoB, l.BtoA, p.Links[1].AtoB)
	}
	wan := emulation.Params{Delay: 5 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.08, Rate: 1e9}
	if l := p.Links[2]; l.AtoB != wan || l.BtoA != wan {
		t.Errorf("wan emulation: %v / %v", l.AtoB, l.BtoA)
	}
}

func TestPlanLine(t *testing.T) {
	p := mustPlan(t, `
name: line
clusters:
  - {name: a, nodes: [{name: gw}, {name: n}]}
  - {name: b, nodes: [{name: gw}, {name: n}]}
  - {name: c, nodes: [{name: gw}, {name: n}]}
wan:
  - between: [a, b]
    forward: {delay: 10ms}
  - between: [c/gw, b]
    reverse: {delay: 20ms}
`)
	wantPlan{
		nodes: map[string]string{
			"a/gw": "10.200.1.1", "a/n": "10.200.1.2",
			"b/gw": "10.200.2.1", "b/n": "10.200.2.2",
			"c/gw": "10.200.3.1", "c/n": "10.200.3.2",
		},
		links: []string{
			"lan a/n lan-gw 10.200.128.0/31 | a/gw lan-n 10.200.128.1/31",
			"lan b/n lan-gw 10.200.128.2/31 | b/gw lan-n 10.200.128.3/31",
			"lan c/n lan-gw 10.200.128.4/31 | c/gw lan-n 10.200.128.5/31",
			"wan a/gw wan-b 10.200.128.6/31 | b/gw wan-a 10.200.128.7/31",
			"wan c/gw wan-b 10.200.128.8/31 | b/gw wan-c 10.200.128.9/31",
		},
		routes: map[string][]string{
			// Transit through b.
			"a/gw": {
				"10.200.1.2/32 via 10.200.128.0 dev lan-n src 10.200.1.1",
				"10.200.2.1/32 via 10.200.128.7 dev wan-b src 10.200.1.1",
				"10.200.2.2/32 via 10.200.128.7 dev wan-b src 10.200.1.1",
				"10.200.3.1/32 via 10.200.128.7 dev wan-b src 10.200.1.1",
				"10.200.3.2/32 via 10.200.128.7 dev wan-b src 10.200.1.1",
			},
			"b/gw": {
				"10.200.1.1/32 via 10.200.128.6 dev wan-a src 10.200.2.1",
				"10.200.1.2/32 via 10.200.128.6 dev wan-a src 10.200.2.1",
				"10.200.2.2/32 via 10.200.128.2 dev lan-n src 10.200.2.1",
				"10.200.3.1/32 via 10.200.128.8 dev wan-c src 10.200.2.1",
				"10.200.3.2/32 via 10.200.128.8 dev wan-c src 10.200.2.1",
			},
		},
	}.check(t, p)
	// forward is the first `between` end's egress.
	if l := p.Links[3]; l.AtoB.Delay != 10*time.Millisecond || !l.BtoA.IsZero() {
		t.Errorf("a--b emulation %v / %v", l.AtoB, l.BtoA)
	}
	if l := p.Links[4]; !l.AtoB.IsZero() || l.BtoA.Delay != 20*time.Millisecond {
		t.Errorf("c--b emulation %v / %v", l.AtoB, l.BtoA)
	}
}

func TestPlanTwoGateways(t *testing.T) {
	p := mustPlan(t, `
name: mg
addressing: 10.9.0.0/16
clusters:
  - name: a
    nodes: [{name: g1, gateway: true}, {name: g2, gateway: true}, {name: client}]
    lan:
      forward: {delay: 2ms}
      reverse: {delay: 3ms}
  - name: b
    nodes: [{name: gw}, {name: server}]
wan:
  - between: [a/g1, b]
  - between: [a/g2, b/gw]
`)
	wantPlan{
		nodes: map[string]string{"a/g1": "10.9.1.1", "a/g2": "10.9.1.2", "a/client": "10.9.1.3", "b/gw": "10.9.2.1", "b/server": "10.9.2.2"},
		links: []string{
			"lan a/client lan-g1 10.9.128.0/31 | a/g1 lan-client 10.9.128.1/31",
			"lan a/client lan-g2 10.9.128.2/31 | a/g2 lan-client 10.9.128.3/31",
			"lan b/server lan-gw 10.9.128.4/31 | b/gw lan-server 10.9.128.5/31",
			"wan a/g1 wan-b 10.9.128.6/31 | b/gw wan-a1 10.9.128.7/31",
			"wan a/g2 wan-b 10.9.128.8/31 | b/gw wan-a2 10.9.128.9/31",
		},
		routes: map[string][]string{
			"a/client": {
				"10.9.1.1/32 via 10.9.128.1 dev lan-g1 src 10.9.1.3",
				"10.9.1.2/32 via 10.9.128.3 dev lan-g2 src 10.9.1.3",
				"10.9.2.1/32 src 10.9.1.3 nexthop via 10.9.128.1 dev lan-g1 nexthop via 10.9.128.3 dev lan-g2",
				"10.9.2.2/32 src 10.9.1.3 nexthop via 10.9.128.1 dev lan-g1 nexthop via 10.9.128.3 dev lan-g2",
			},
			// g1 reaches g2 through the client (2 hops, no WAN), not through
			// b/gw (2 hops, 2 WAN links).
			"a/g1": {
				"10.9.1.2/32 via 10.9.128.0 dev lan-client src 10.9.1.1",
				"10.9.1.3/32 via 10.9.128.0 dev lan-client src 10.9.1.1",
				"10.9.2.1/32 via 10.9.128.7 dev wan-b src 10.9.1.1",
				"10.9.2.2/32 via 10.9.128.7 dev wan-b src 10.9.1.1",
			},
			"b/gw": {
				"10.9.1.1/32 via 10.9.128.6 dev wan-a1 src 10.9.2.1",
				"10.9.1.2/32 via 10.9.128.8 dev wan-a2 src 10.9.2.1",
				"10.9.1.3/32 src 10.9.2.1 nexthop via 10.9.128.6 dev wan-a1 nexthop via 10.9.128.8 dev wan-a2",
				"10.9.2.2/32 via 10.9.128.4 dev lan-server src 10.9.2.1",
			},
		},
	}.check(t, p)
	if gws := p.Gateways("a"); len(gws) != 2 || gws[0].ID != "a/g1" || gws[1].ID != "a/g2" {
		t.Errorf("Gateways(a) = %v", gws)
	}
	if gws := p.Gateways("b"); len(gws) != 1 || gws[0].ID != "b/gw" {
		t.Errorf("Gateways(b) = %v", gws)
	}
	if gws := p.Gateways("zz"); gws != nil {
		t.Errorf("Gateways(zz) = %v", gws)
	}
	// forward is the non-gateway node's egress on LAN links.
	for _, l := range p.Links[:2] {
		if l.AtoB.Delay != 2*time.Millisecond || l.BtoA.Delay != 3*time.Millisecond {
			t.Errorf("%s: %v / %v", l.Name, l.AtoB, l.BtoA)
		}
	}
}

func TestPlanSingleCluster(t *testing.T) {
	p := mustPlan(t, `
name: solo
congestion-control: reno
emulator: userspace
clusters:
  - name: c
    nodes: [{name: n1}, {name: n2}, {name: n3, congestion-control: bbr}]
`)
	wantPlan{
		nodes: map[string]string{"c/n1": "10.200.1.1", "c/n2": "10.200.1.2", "c/n3": "10.200.1.3"},
		links: []string{
			"lan c/n2 lan-n1 10.200.128.0/31 | c/n1 lan-n2 10.200.128.1/31",
			"lan c/n3 lan-n1 10.200.128.2/31 | c/n1 lan-n3 10.200.128.3/31",
		},
		routes: map[string][]string{
			"c/n2": {
				"10.200.1.1/32 via 10.200.128.1 dev lan-n1 src 10.200.1.2",
				"10.200.1.3/32 via 10.200.128.1 dev lan-n1 src 10.200.1.2",
			},
		},
	}.check(t, p)
	if p.Emulator != "userspace" {
		t.Errorf("emulator %q", p.Emulator)
	}
	n1, _ := p.Node("c/n1")
	n3, _ := p.Node("c/n3")
	if !n1.Gateway || n1.CongestionControl != "reno" || n3.CongestionControl != "bbr" {
		t.Errorf("n1 %+v n3 %+v", n1, n3)
	}

	// One node alone: no links, no routes.
	p = mustPlan(t, "name: one\nclusters: [{name: c, nodes: [{name: n}]}]\n")
	if len(p.Nodes) != 1 || len(p.Links) != 0 || len(p.Nodes[0].Routes) != 0 {
		t.Errorf("one-node plan: %+v", p)
	}
}

func TestPlanNumberedWANDevices(t *testing.T) {
	// Two links from a/gw to different gateways of b get numbered names;
	// the link to c keeps its plain one.
	p := mustPlan(t, `
name: num
clusters:
  - {name: a, nodes: [{name: gw}]}
  - {name: b, nodes: [{name: x, gateway: true}, {name: y, gateway: true}, {name: n}]}
  - {name: c, nodes: [{name: gw}]}
wan:
  - between: [a, b/x]
  - between: [a, c]
  - between: [b/y, a]
`)
	gw, _ := p.Node("a/gw")
	var devs []string
	for _, l := range p.Links {
		if l.A.Node == gw.ID {
			devs = append(devs, l.A.Device)
		}
		if l.B.Node == gw.ID {
			devs = append(devs, l.B.Device)
		}
	}
	if want := []string{"wan-b1", "wan-c", "wan-b2"}; !reflect.DeepEqual(devs, want) {
		t.Errorf("a/gw devices %v, want %v", devs, want)
	}
}

func TestPlanEmulate(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, string(data))
	e := emulation.Params{Delay: 7 * time.Millisecond}
	p.Emulate(WAN, e)
	p.Emulate(LAN, emulation.Params{})
	for _, l := range p.Links {
		want := emulation.Params{}
		if l.Class == WAN {
			want = e
		}
		if l.AtoB != want || l.BtoA != want {
			t.Errorf("%s: %v / %v, want %v", l.Name, l.AtoB, l.BtoA, want)
		}
	}
}

func TestPlanAddressingWiderThan16(t *testing.T) {
	p := mustPlan(t, "name: w\naddressing: 10.0.0.0/8\nclusters: [{name: c, nodes: [{name: a}, {name: b}]}]\n")
	if got := p.Nodes[1].Addr; got != netip.MustParseAddr("10.0.1.2") {
		t.Errorf("addr %v", got)
	}
	if got := p.Links[0].A.Addr; got != netip.MustParsePrefix("10.0.128.0/31") {
		t.Errorf("link addr %v", got)
	}
}

func TestCheckCatchesBrokenPlans(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(p *Plan)
		want   string
	}{
		{"duplicate address", func(p *Plan) { p.Nodes[1].Addr = p.Nodes[0].Addr }, "is also"},
		{"wrong next hop", func(p *Plan) { p.Nodes[1].Routes[0].NextHops[0].Via = netip.MustParseAddr("10.200.128.9") }, "not the far end"},
		{"missing route", func(p *Plan) { p.Nodes[1].Routes = p.Nodes[1].Routes[1:] }, "no route"},
		{"long device", func(p *Plan) { p.Links[0].A.Device = "a-very-long-device" }, "1–15 bytes"},
		{"not a /31", func(p *Plan) { p.Links[0].B.Addr = netip.MustParsePrefix("10.200.129.1/31") }, "share a /31"},
		{"wrong src", func(p *Plan) { p.Nodes[0].Routes[0].Src = p.Nodes[1].Addr }, "src"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPlan(t, string(data))
			tc.mutate(p)
			err := p.Check()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check() = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// TestDocExample keeps the annotated example in docs/topology.md valid.
func TestDocExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "topology.md"))
	if err != nil {
		t.Skip(err)
	}
	_, rest, ok := strings.Cut(string(data), "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("no yaml block in docs/topology.md")
	}
	p := mustPlan(t, block)
	if len(p.Nodes) != 4 || len(p.Links) != 3 {
		t.Errorf("doc example: %d nodes, %d links", len(p.Nodes), len(p.Links))
	}
}

func TestRenameMovesEveryNamespace(t *testing.T) {
	topo, err := Parse([]byte("name: qs\nclusters:\n  - {name: a, nodes: [{name: gw}, {name: s}]}\n  - {name: b, nodes: [{name: gw}]}\nwan: [{between: [a, b]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := topo.Plan()
	if err != nil {
		t.Fatal(err)
	}
	p.Rename("qs7")
	if err := p.Check(); err != nil {
		t.Fatal(err)
	}
	for _, n := range p.Nodes {
		if want := Namespace("qs7", n.Cluster, n.Name); n.Netns != want {
			t.Errorf("node %s: namespace %s, want %s", n.ID, n.Netns, want)
		}
	}
	for _, l := range p.Links {
		for _, e := range []LinkEnd{l.A, l.B} {
			if !strings.HasPrefix(e.Netns, "st-qs7-") {
				t.Errorf("link %s end in %s", l.Name, e.Netns)
			}
		}
	}
}

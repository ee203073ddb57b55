package gateway

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/packet"
)

func TestPacketConfigErrors(t *testing.T) {
	packetPeer := goodConfig + "peers: {b: {data-plane: packet}}\n"
	tests := []struct{ name, yaml, want string }{
		{"bad mode", goodConfig + "peers: {b: {data-plane: xdp}}\n", `peers.b.data-plane "xdp": must be stream or packet`},
		{"bad peer name", goodConfig + "peers: {B_1: {data-plane: stream}}\n", "peers.B_1: a peer is named by its cluster ID"},
		{"unknown peer field", goodConfig + "peers: {b: {mode: packet}}\n", "field mode not found"},
		{"no lan", packetPeer + "packet: {snat: 10.0.0.9}\n", "packet.lan: required when a peer's data-plane is packet"},
		{"no snat", packetPeer + "packet: {lan: eth1}\n", `packet.snat "": required when a peer's data-plane is packet`},
		{"ipv6 snat", packetPeer + "packet: {lan: eth1, snat: \"fd00::1\"}\n", `packet.snat "fd00::1"`},
		{"relative pin root", packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, pin-root: bpf}\n", `packet.pin-root "bpf": want an absolute path`},
		{"small mtu", packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, underlay-mtu: 600}\n", "packet.underlay-mtu 600: allowed 626..65535 (0: the smallest MTU of the routes to the peer gateways)"},
		{"large mtu", packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, underlay-mtu: 70000}\n", "packet.underlay-mtu 70000: allowed 626..65535"},
		{"bad name", packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, name: GW}\n", `packet.name "GW"`},
		{"probe port", packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, probe-port: 70000}\n", "packet.probe-port 70000: allowed 1..65535"},
		{"probe interval", packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, probe-interval: 100us}\n", "packet.probe-interval 100µs: allowed 1ms..10s"},
		{"probe misses", packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, probe-misses: -2}\n", "packet.probe-misses -2: allowed 1..1000"},
		{"flow entries", packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, flow-entries: -1}\n", "packet.flow-entries -1: allowed 1..16777216 (0: 65536)"},
		{"too many flow entries", packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, flow-entries: 20000000}\n", "packet.flow-entries 20000000: allowed 1..16777216"},
		// A section without packet peers is for Peer resources that ask for
		// the mode: checked all the same.
		{"section alone, no snat", goodConfig + "packet: {lan: eth1}\n", `packet.snat "": required`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig(writeConfig(t, t.TempDir(), tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Stream peers need no packet section; packet ones with it load.
	for _, y := range []string{
		goodConfig + "peers: {b: {data-plane: stream}, c: {}}\n",
		packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, pin-root: /run/strait/bpf, teardown-on-exit: true}\n",
		packetPeer + "packet: {lan: eth1, snat: 10.0.0.9, probe-port: -1, probe-interval: 5ms, probe-misses: 8}\n",
	} {
		c, err := LoadConfig(writeConfig(t, t.TempDir(), y))
		if err != nil {
			t.Fatalf("%q: %v", y, err)
		}
		if c.dataPlane("c") != DataPlaneStream || c.dataPlane("nobody") != DataPlaneStream {
			t.Errorf("default data plane is not stream")
		}
	}
}

func TestPacketHelloErrors(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"mode":"xdp"}`, `mode "xdp": want stream or packet`},
		{`{"mode":"packet","extra":1}`, `unknown field "extra"`},
		{`{"mode":"packet"} {}`, "trailing data"},
		{`{"mode":"packet","imports":[{"namespace":"d","name":"e","address":"fd00::1","port":80,"protocol":"TCP"}]}`, `imports[0].address "fd00::1": want an IPv4 address`},
		{`{"mode":"packet","imports":[{"namespace":"d","name":"e","address":"10.0.0.1","port":0,"protocol":"TCP"}]}`, "imports[0].port: 0"},
		{`{"mode":"packet","imports":[{"namespace":"d","name":"e","address":"10.0.0.1","port":80,"protocol":"SCTP"}]}`, `imports[0].protocol "SCTP"`},
		{`{"mode":"packet","imports":[{"namespace":"D","name":"e","address":"10.0.0.1","port":80,"protocol":"TCP"}]}`, "must be DNS labels"},
		{`{"mode":"packet","sources":[{"cidr":"10.0.0.1/8"}]}`, `sources[0].cidr "10.0.0.1/8": want a masked CIDR prefix`},
		{`{"mode":"packet","sources":[{"cidr":"10.0.0.0/8","namespace":"W"}]}`, `sources[0].namespace "W"`},
		{`{"mode":"packet","imports":[{"port":70000}]}`, "cannot unmarshal"},
	}
	for _, tc := range tests {
		_, err := parsePacketHello(strings.NewReader(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.body, err, tc.want)
		}
	}
	if _, err := parsePacketHello(strings.NewReader(`{"mode":"packet","imports":[{"namespace":"d","name":"e","address":"10.0.0.1","port":80,"protocol":"UDP"}],"sources":[{"cidr":"10.0.0.0/8","namespace":"web","labels":{"app":"web"}}]}`)); err != nil {
		t.Errorf("a good hello: %v", err)
	}
	if _, err := parsePacketAnswer(strings.NewReader(`{"mode":"stream","reason":"two\nlines"}`)); err == nil {
		t.Errorf("an answer with a two-line reason was accepted")
	}
}

// TestPacketDown: dead gateways leave the table unless all of the peer's
// look dead (their programs outlive their processes).
func TestPacketDown(t *testing.T) {
	gws := map[string]netip.Addr{"g1:4443": netip.MustParseAddr("192.0.2.1"), "g2:4443": netip.MustParseAddr("192.0.2.2")}
	if d := packetDown(gws, map[string]bool{"g1:4443": true, "g2:4443": false}); !d["g2:4443"] || d["g1:4443"] {
		t.Errorf("one dead: down %v, want g2 alone", d)
	}
	if d := packetDown(gws, map[string]bool{}); len(d) != 0 {
		t.Errorf("all dead: down %v, want none", d)
	}
	if d := packetDown(gws, nil); len(d) != 0 {
		t.Errorf("no pool: down %v, want none", d)
	}
	a, err := packetTable(gws, map[string]bool{"g1:4443": true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := packetTable(gws, map[string]bool{"g1:4443": true, "g2:4443": true}, nil)
	if a.key == b.key {
		t.Errorf("tables with different dead gateways have one key %q", a.key)
	}
	if _, owners := a.table.Owners(); len(owners) == 0 {
		t.Fatal("empty table")
	}
}

// TestPacketServices: only imports of that peer (one of their source
// clusters), IPv4 addresses and TCP or UDP ports are offered.
func TestPacketServices(t *testing.T) {
	imp := &catalog.ServiceImport{Spec: catalog.ServiceImportSpec{
		IPs:      []string{"10.96.0.10", "fd00::10"},
		Ports:    []catalog.ServicePort{{Port: 80, Protocol: catalog.TCP}, {Port: 53, Protocol: catalog.UDP}, {Port: 9, Protocol: "SCTP"}},
		Clusters: []catalog.ClusterStatus{{Cluster: "b"}},
	}}
	got := packetServices(imp, "b")
	want := []packet.Service{
		{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Proto: packet.TCP},
		{Addr: netip.MustParseAddr("10.96.0.10"), Port: 53, Proto: packet.UDP},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("services %v, want %v", got, want)
	}
	if s := packetServices(imp, "c"); len(s) != 0 {
		t.Errorf("another peer's import: %v", s)
	}
	imp.Spec.Clusters = append(imp.Spec.Clusters, catalog.ClusterStatus{Cluster: "c"})
	for _, peer := range []string{"b", "c"} {
		if s := packetServices(imp, peer); len(s) != 2 {
			t.Errorf("a two-cluster import offered to %s: %v, want its 2 services", peer, s)
		}
	}
}

// TestPacketImportCluster: an import takes the first of its clusters
// whose gateways are not all dead, as the stream mode tries them in
// order; a cluster without a table keeps the whole import on streams.
func TestPacketImportCluster(t *testing.T) {
	slots := map[string]uint32{"b": 0, "c": 1}
	for _, tc := range []struct {
		cs      []string
		dead    map[string]bool
		want    string
		ok      bool
		skipped []string
	}{
		{cs: []string{"c", "b"}, want: "c", ok: true},
		{cs: []string{"b", "c"}, want: "b", ok: true},
		{cs: []string{"c", "b"}, dead: map[string]bool{"c": true}, want: "b", ok: true, skipped: []string{"c"}},
		{cs: []string{"c", "b"}, dead: map[string]bool{"b": true}, want: "c", ok: true},
		// All dead: the first, and nothing failed over.
		{cs: []string{"c", "b"}, dead: map[string]bool{"b": true, "c": true}, want: "c", ok: true},
		{cs: []string{"c", "d"}}, // d: streams
		{cs: []string{"d"}},
		{cs: nil},
	} {
		c, ok, skipped := packetImportCluster(tc.cs, slots, tc.dead)
		if c != tc.want || ok != tc.ok || !slices.Equal(skipped, tc.skipped) {
			t.Errorf("clusters %v, dead %v: got %q %v %v, want %q %v %v", tc.cs, tc.dead, c, ok, skipped, tc.want, tc.ok, tc.skipped)
		}
	}
	gws := map[string]netip.Addr{"g1": netip.MustParseAddr("192.0.2.1"), "g2": netip.MustParseAddr("192.0.2.2")}
	if allDead(gws, nil) || allDead(gws, map[string]bool{"g2": true}) || !allDead(gws, map[string]bool{"g1": false}) {
		t.Error("allDead: wrong verdict")
	}
}

// FuzzPacketHello: the packet mode's control messages never panic, and
// what the parsers accept encodes to something they accept again.
func FuzzPacketHello(f *testing.F) {
	f.Add([]byte(`{"mode":"packet","imports":[{"namespace":"d","name":"e","address":"10.0.0.1","port":80,"protocol":"TCP"}],"sources":[{"cidr":"10.0.0.0/8","labels":{"a":"b"}}]}`))
	f.Add([]byte(`{"mode":"stream"}`))
	f.Add([]byte(`{"mode":"stream","reason":"configured"}`))
	f.Add([]byte(`{"mode":"packet","imports":[{"port":65536}]}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if h, err := parsePacketHello(bytes.NewReader(data)); err == nil {
			b, _ := json.Marshal(h)
			if _, err := parsePacketHello(bytes.NewReader(b)); err != nil {
				t.Fatalf("accepted %q, refused its encoding %q: %v", data, b, err)
			}
			if len(packetSources(h.Sources)) > len(h.Sources) {
				t.Fatal("more policy sources than sources")
			}
		}
		if a, err := parsePacketAnswer(bytes.NewReader(data)); err == nil {
			b, _ := json.Marshal(a)
			if _, err := parsePacketAnswer(bytes.NewReader(b)); err != nil {
				t.Fatalf("accepted answer %q, refused its encoding %q: %v", data, b, err)
			}
		}
	})
}

// TestPacketHeard: an offer changes the plane's state only when it is new
// or different (each change makes the gateway offer back at once, so
// "changed" on every offer would have two gateways trade offers without
// pause), and a gateway configured for streams refuses with its reason.
func TestPacketHeard(t *testing.T) {
	g := &Gateway{cfg: Config{Cluster: "a", Peers: map[string]PeerConfig{"b": {DataPlane: DataPlanePacket}}},
		metrics: newMetrics(), log: slog.New(slog.DiscardHandler), store: openStore(t)}
	p := newPacketPlane(g)
	h := func(port uint16) *packetHello {
		return &packetHello{Mode: DataPlanePacket, Imports: []packetImport{{Namespace: "d", Name: "e", Address: "10.96.0.1", Port: port, Protocol: "TCP"}}}
	}
	for i, step := range []struct {
		hello   *packetHello
		changed bool
	}{{h(80), true}, {h(80), false}, {h(80), false}, {h(81), true}, {h(81), false}} {
		ans, changed := p.heard("b", step.hello)
		if ans.Mode != DataPlanePacket || changed != step.changed {
			t.Errorf("offer %d: answer %+v, changed %v; want packet, %v", i, ans, changed, step.changed)
		}
	}
	ans, _ := p.heard("c", h(80))
	if ans.Mode != DataPlaneStream || !strings.Contains(ans.Reason, "data-plane stream for peer c") {
		t.Errorf("unconfigured peer: answer %+v, want stream with the reason", ans)
	}
	if st := p.status(); len(st) != 2 || st[1].Cluster != "c" || st[1].Peer != DataPlanePacket || st[1].Reason == "" {
		t.Errorf("status %+v, want c's refused offer", st)
	}
}

func openStore(t *testing.T) *catalog.Store {
	t.Helper()
	st, err := catalog.OpenStore(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPeerResourceDataPlane: a Peer resource's spec.dataPlane overrides
// the configuration's peers.<cluster>.data-plane either way; asking for
// the packet mode of a gateway without a packet section gets streams and
// a reason naming what is missing, in the status too.
func TestPeerResourceDataPlane(t *testing.T) {
	peer := func(name string, dp catalog.DataPlane) *catalog.Peer {
		return &catalog.Peer{Metadata: catalog.ObjectMeta{Name: name}, Spec: catalog.PeerSpec{Gateways: []string{name + ":4443"}, DataPlane: dp}}
	}
	for _, tc := range []struct {
		name    string
		cfg     Config
		peers   []*catalog.Peer
		want    map[string]string // peer → mode
		packet  []string
		because string // in b's reason
		streams bool   // streams may serve this gateway's exports
	}{
		{"resource asks packet", Config{Cluster: "a", Packet: PacketConfig{LAN: "eth1", SNAT: "10.1.0.254"}},
			[]*catalog.Peer{peer("b", catalog.DataPlanePacket), peer("c", "")},
			map[string]string{"b": DataPlanePacket, "c": DataPlaneStream}, []string{"b"}, "", true},
		{"resource says stream over the configuration", Config{Cluster: "a", Packet: PacketConfig{LAN: "eth1", SNAT: "10.1.0.254"},
			Peers: map[string]PeerConfig{"b": {DataPlane: DataPlanePacket}, "c": {DataPlane: DataPlanePacket}}},
			[]*catalog.Peer{peer("b", catalog.DataPlaneStream), peer("c", "")},
			map[string]string{"b": DataPlaneStream, "c": DataPlanePacket}, []string{"c"}, "", true},
		{"every peer in the packet mode", Config{Cluster: "a", Packet: PacketConfig{LAN: "eth1", SNAT: "10.1.0.254"},
			Peers: map[string]PeerConfig{"b": {DataPlane: DataPlanePacket}}},
			[]*catalog.Peer{peer("b", ""), peer("c", catalog.DataPlanePacket)},
			map[string]string{"b": DataPlanePacket, "c": DataPlanePacket}, []string{"b", "c"}, "", false},
		{"no packet section", Config{Cluster: "a"},
			[]*catalog.Peer{peer("b", catalog.DataPlanePacket)},
			map[string]string{"b": DataPlaneStream}, nil, "no packet section (packet.lan, packet.snat)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &Gateway{cfg: tc.cfg, metrics: newMetrics(), log: slog.New(slog.DiscardHandler), store: openStore(t)}
			for _, p := range tc.peers {
				if _, err := g.store.Apply(p); err != nil {
					t.Fatal(err)
				}
			}
			for id, want := range tc.want {
				if got, why := g.dataPlane(id); got != want {
					t.Errorf("data plane for %s: %s (%s), want %s", id, got, why, want)
				}
			}
			if got := g.packetPeers(); !slices.Equal(got, tc.packet) {
				t.Errorf("packet peers %v, want %v", got, tc.packet)
			}
			if got := g.streamsMayServeExports(); got != tc.streams {
				t.Errorf("streams may serve exports: %v, want %v", got, tc.streams)
			}
			if tc.because != "" {
				if _, why := g.dataPlane("b"); !strings.Contains(why, tc.because) {
					t.Errorf("reason %q, want it to say %q", why, tc.because)
				}
				st := newPacketPlane(g).status()
				if len(st) != 1 || !strings.Contains(st[0].Reason, tc.because) {
					t.Errorf("status %+v, want b with the reason", st)
				}
			}
		})
	}
}

// TestHelloSources: Workloads go ahead of the configured sources, the
// hello stays within the bounds its parser enforces (the peer would
// refuse it whole), and what is left out is counted, not lost silently.
func TestHelloSources(t *testing.T) {
	configured := []packetSourceW{{CIDR: "10.1.0.0/24", Namespace: "web"}}
	big := map[string]string{}
	for i := range maxLabels + 1 {
		big[strings.Repeat("k", i+1)] = "v"
	}
	var workloads []packetSourceW
	for i := range maxPacketSources + 10 {
		a := netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)})
		workloads = append(workloads, packetSourceW{CIDR: netip.PrefixFrom(a, 32).String(), Namespace: "web", Labels: map[string]string{"role": "x"}})
	}
	workloads = append([]packetSourceW{
		{CIDR: "10.9.0.1/32", Namespace: "web", Labels: big}, // too many labels
		{CIDR: "fd00::1/128", Namespace: "web"},              // IPv6: not carried, not counted
	}, workloads...)
	srcs, unsent := helloSources(workloads, configured)
	if len(srcs) != maxPacketSources {
		t.Errorf("%d sources, want %d", len(srcs), maxPacketSources)
	}
	if want := 1 + 10 + 1; unsent != want { // the big one, past the room, and one for the configured source's place
		t.Errorf("unsent %d, want %d", unsent, want)
	}
	if srcs[0].CIDR != "10.2.0.0/32" || srcs[len(srcs)-1].CIDR != "10.1.0.0/24" {
		t.Errorf("order: first %s, last %s; want the Workloads first and the configured source last", srcs[0].CIDR, srcs[len(srcs)-1].CIDR)
	}
	b, err := json.Marshal(&packetHello{Mode: DataPlanePacket, Sources: srcs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parsePacketHello(bytes.NewReader(b)); err != nil {
		t.Errorf("the peer would refuse the hello: %v", err)
	}
}

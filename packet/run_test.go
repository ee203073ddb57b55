package packet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/policy"
	"github.com/strait-net/strait/ring"
)

// These tests run the programs with BPF_PROG_TEST_RUN on packets built
// here: real verifier, real maps, real helpers, no interfaces.

const (
	tcActOK       = 0
	tcActShot     = 2
	tcActRedirect = 7
)

// frame builds an Ethernet/IPv4/TCP or UDP frame with payload bytes.
func frame(proto Proto, src, dst netip.AddrPort, syn bool, payload int) []byte {
	l4 := 8
	if proto == TCP {
		l4 = 20
	}
	b := make([]byte, 14+20+l4+payload)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+l4+payload))
	ip[8] = 64
	ip[9] = uint8(proto)
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:20]))
	th := ip[20:]
	binary.BigEndian.PutUint16(th, src.Port())
	binary.BigEndian.PutUint16(th[2:], dst.Port())
	if proto == TCP {
		th[12] = 5 << 4
		if syn {
			th[13] = 0x02
		}
	} else {
		binary.BigEndian.PutUint16(th[4:], uint16(8+payload))
	}
	return b
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func run(t testing.TB, p *ebpf.Program, pkt []byte) uint32 {
	t.Helper()
	ret, err := p.Run(&ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)+256)})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return ret
}

// importFixture loads the programs with one import (vip:80/TCP) served by
// a cluster of gateways gws, every client allowed.
type importFixture struct {
	d     *Datapath
	vip   netip.AddrPort
	gws   []string
	addrs map[string]netip.Addr
	table *ring.Table
}

func newImportFixture(t testing.TB, n int) *importFixture {
	return newImportFixtureConfig(t, n, Config{FlowEntries: 1 << 18})
}

func newImportFixtureConfig(t testing.TB, n int, cfg Config) *importFixture {
	d := loadTest(t, cfg)
	f := &importFixture{d: d, vip: netip.MustParseAddrPort("10.96.0.10:80"), addrs: map[string]netip.Addr{}}
	peers := map[netip.Addr]Peer{}
	for i := range n {
		name := fmt.Sprintf("gw-%d", i)
		a := netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)})
		f.gws = append(f.gws, name)
		f.addrs[name] = a
		peers[a] = Peer{Cluster: 1, Alive: true}
	}
	var err error
	if f.table, err = ring.New(f.gws, ring.Options{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	must(t, d.SetPeers(peers))
	must(t, d.SetTable(0, f.table, f.addrs))
	must(t, d.SetImports(map[Service]Import{{f.vip.Addr(), f.vip.Port(), TCP}: {ID: 1, Table: 0}, {f.vip.Addr(), f.vip.Port(), UDP}: {ID: 1, Table: 0}}))
	must(t, d.SetPolicy(map[PolicyKey]Verdict{{Cluster: 0, Service: 1, Prefix: netip.MustParsePrefix("0.0.0.0/0")}: {Allow: true, Rule: 1}}))
	must(t, d.coll.Maps["config"].Update(uint32(0), settings{TunIfindex: 1, VNI: 1, MSS: 1410}, ebpf.UpdateAny))
	return f
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func randomClient(r *rand.Rand) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(r.IntN(256)), byte(r.IntN(256)), byte(1 + r.IntN(254))}),
		uint16(1024+r.IntN(64512)))
}

// TestPropertyMaglevMatchesRing: for 100 000 random flows the gateway the
// program pins equals ring's choice for the same table — with every member
// up, with one down (its peer entry dead, the WithDown view written), and
// after it comes back.
func TestPropertyMaglevMatchesRing(t *testing.T) {
	f := newImportFixture(t, 5)
	prog := f.d.Program("lan_ingress")
	r := rand.New(rand.NewPCG(1, 2))
	const flows = 100_000
	clients := make([]netip.AddrPort, flows)
	for i := range clients {
		clients[i] = randomClient(r)
	}
	check := func(phase string, view *ring.Table) {
		t.Helper()
		bad := 0
		for _, c := range clients {
			if ret := run(t, prog, frame(TCP, c, f.vip, false, 0)); ret != tcActRedirect {
				t.Fatalf("%s: flow %v: verdict %d, want redirect (%d)", phase, c, ret, tcActRedirect)
			}
			got, ok := f.d.Flow(Flow{c, f.vip, TCP})
			want, _ := view.Lookup(ring.KeyOf(uint8(TCP), c, f.vip))
			if !ok || got != f.addrs[want] {
				if bad++; bad <= 5 {
					t.Errorf("%s: flow %v pinned to %v, ring says %s (%v)", phase, c, got, want, f.addrs[want])
				}
			}
		}
		if bad > 0 {
			t.Fatalf("%s: %d of %d flows disagree with ring", phase, bad, flows)
		}
	}
	check("all up", f.table)

	// gw-2 dies: its flows move to the heirs the WithDown view names, and
	// no other pinned flow moves (their gateways are alive).
	down := f.table.WithDown(map[string]bool{"gw-2": true})
	peers := map[netip.Addr]Peer{}
	for _, g := range f.gws {
		peers[f.addrs[g]] = Peer{Cluster: 1, Alive: g != "gw-2"}
	}
	must(t, f.d.SetPeers(peers))
	must(t, f.d.SetTable(0, down, f.addrs))
	check("gw-2 down", down)
	c, err := f.d.Counters()
	must(t, err)
	if c["import_repinned_flows"] == 0 {
		t.Error("no flow was repinned off the dead gateway")
	}

	// gw-2 is back: pinned flows stay where they are (the LRU map keeps
	// established flows in place); new flows follow the full table again.
	for _, g := range f.gws {
		peers[f.addrs[g]] = Peer{Cluster: 1, Alive: true}
	}
	must(t, f.d.SetPeers(peers))
	must(t, f.d.SetTable(0, f.table, f.addrs))
	check("gw-2 back, pinned flows", down)
	must(t, f.d.ClearFlows())
	check("gw-2 back, new flows", f.table)
}

// TestPeerEpoch: an established flow's packets skip the peers lookup — its
// entry holds the epoch at which its gateway was last found alive — yet a
// write of peers still moves it off a gateway that died: every SetPeers
// advances the epoch, and so does a new Load over the pins (bpf/packet.c,
// peer_epoch). It fails when SetPeers leaves the epoch as it was: the
// stamped flow then stays on the dead gateway.
func TestPeerEpoch(t *testing.T) {
	f := newImportFixture(t, 2)
	prog := f.d.Program("lan_ingress")
	client := netip.MustParseAddrPort("10.1.0.2:40000")
	flow := Flow{client, f.vip, UDP}
	send := func(what string) {
		t.Helper()
		if ret := run(t, prog, frame(UDP, client, f.vip, false, 10)); ret != tcActRedirect {
			t.Fatalf("%s: verdict %d, want redirect (%d)", what, ret, tcActRedirect)
		}
	}
	epoch := func() uint32 {
		t.Helper()
		var e uint32
		must(t, f.d.coll.Maps["peer_epoch"].Lookup(uint32(0), &e))
		return e
	}
	stamp := func() uint32 {
		t.Helper()
		var v []byte
		must(t, f.d.coll.Maps["flows"].Lookup(flow, &v))
		return binary.NativeEndian.Uint32(v[12:]) // struct flow_val's alive_epoch
	}

	send("first packet")
	if s := stamp(); s != 0 {
		t.Errorf("a new flow's entry has epoch %d, want 0 (its gateway not yet checked)", s)
	}
	send("second packet")
	e := epoch()
	if e == 0 || stamp() != e {
		t.Fatalf("after the second packet: flow epoch %d, peers epoch %d; want equal and not 0", stamp(), e)
	}
	gw, ok := f.d.Flow(flow)
	if !ok {
		t.Fatal("the flow is not pinned")
	}

	// Its gateway dies: the peers entry says so and the table's view
	// leaves it out.
	peers := map[netip.Addr]Peer{}
	var dead string
	for _, g := range f.gws {
		peers[f.addrs[g]] = Peer{Cluster: 1, Alive: f.addrs[g] != gw}
		if f.addrs[g] == gw {
			dead = g
		}
	}
	must(t, f.d.SetPeers(peers))
	if epoch() == e {
		t.Fatalf("SetPeers left the peers epoch at %d", e)
	}
	must(t, f.d.SetTable(0, f.table.WithDown(map[string]bool{dead: true}), f.addrs))
	send("after the gateway died")
	if now, _ := f.d.Flow(flow); now == gw {
		t.Fatalf("the flow stayed on the dead gateway %v", gw)
	}
	c, err := f.d.Counters()
	must(t, err)
	if c["import_repinned_flows"] != 1 {
		t.Errorf("import_repinned_flows = %d, want 1", c["import_repinned_flows"])
	}

	// A new process over the pins starts a new epoch: what the programs
	// stamped before may be older than what an earlier version wrote.
	e = epoch()
	d2, err := Load(f.d.cfg, nil)
	must(t, err)
	defer d2.Close()
	if epoch() == e {
		t.Errorf("Load left the peers epoch at %d", e)
	}
}

// TestFlowMapUseBatches: a flow map holding more entries than one batch
// read returns is counted whole, as walking its keys counts it.
func TestFlowMapUseBatches(t *testing.T) {
	f := newImportFixtureConfig(t, 3, Config{FlowEntries: 3 * flowBatch})
	prog := f.d.Program("lan_ingress")
	r := rand.New(rand.NewPCG(5, 6))
	for range flowBatch + flowBatch/2 {
		if ret := run(t, prog, frame(UDP, randomClient(r), f.vip, false, 10)); ret != tcActRedirect {
			t.Fatalf("verdict %d, want redirect", ret)
		}
	}
	flows, err := f.d.Flows()
	must(t, err)
	if len(flows) <= flowBatch {
		t.Fatalf("the map holds %d flows, want more than a batch (%d)", len(flows), flowBatch)
	}
	n, size, err := f.d.FlowMapUse()
	if err != nil || n != len(flows) || size != 3*flowBatch {
		t.Errorf("FlowMapUse = %d of %d (%v), want %d of %d", n, size, err, len(flows), 3*flowBatch)
	}
	m := f.d.coll.Maps["flows"]
	if w, err := walkFlowMap(m, size); err != nil || w != len(flows) {
		t.Errorf("walkFlowMap = %d (%v), want %d", w, err, len(flows))
	}
	b, err := batchCountFlowMap(m, size)
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("no batch reads here: %v", err)
	}
	if err != nil || b != len(flows) {
		t.Errorf("batchCountFlowMap = %d (%v), want %d", b, err, len(flows))
	}
}

// TestFlowMapFull: with more live flows than the flow map holds, the
// oldest are evicted and every packet is still forwarded — to the gateway
// the table names, so an evicted flow that comes back lands where it was.
func TestFlowMapFull(t *testing.T) {
	f := newImportFixtureConfig(t, 3, Config{FlowEntries: 64})
	prog := f.d.Program("lan_ingress")
	r := rand.New(rand.NewPCG(3, 4))
	clients := make([]netip.AddrPort, 2000)
	for i := range clients {
		clients[i] = randomClient(r)
	}
	for round := range 2 {
		for _, c := range clients {
			if ret := run(t, prog, frame(UDP, c, f.vip, false, 10)); ret != tcActRedirect {
				t.Fatalf("round %d, flow %v: verdict %d, want redirect", round, c, ret)
			}
		}
	}
	flows, err := f.d.Flows()
	must(t, err)
	if len(flows) > 64 {
		t.Errorf("flow map holds %d flows, at most 64", len(flows))
	}
	if n, size, err := f.d.FlowMapUse(); err != nil || n != len(flows) || size != 64 {
		t.Errorf("FlowMapUse = %d of %d (%v), want %d of 64", n, size, err, len(flows))
	}
	if n, err := walkFlowMap(f.d.coll.Maps["flows"], 64); err != nil || n != len(flows) {
		t.Errorf("walkFlowMap = %d (%v), want %d", n, err, len(flows))
	}
	for fl, gw := range flows {
		want, _ := f.table.Lookup(ring.KeyOf(uint8(UDP), fl.Src, fl.Dst))
		if gw != f.addrs[want] {
			t.Errorf("flow %v on %v, ring says %v", fl, gw, f.addrs[want])
		}
	}
	c, err := f.d.Counters()
	must(t, err)
	// Every packet placed a flow again: evictions show as placements
	// beyond the flows the map holds.
	if c["import_flows"] < 2*2000-64 {
		t.Errorf("import_flows %d: evicted flows were not placed again", c["import_flows"])
	}
}

// addNATEntry makes f's datapath an exporting gateway with SNAT address
// 10.2.0.254 that holds one NAT entry: client (from peer 192.0.2.1) to
// f.vip, translated to target 10.2.0.2:8080 from SNAT port 40000.
func addNATEntry(t testing.TB, f *importFixture, client netip.AddrPort) (snat netip.Addr, target netip.AddrPort) {
	snat = netip.MustParseAddr("10.2.0.254")
	target = netip.MustParseAddrPort("10.2.0.2:8080")
	must(t, f.d.coll.Maps["config"].Update(uint32(0), settings{TunIfindex: 1, VNI: 1, MSS: 1410, SNAT: snat}, ebpf.UpdateAny))
	addRNAT(t, f, target, 40000, client, f.vip)
	return snat, target
}

// addRNAT writes the reverse NAT entry of one export flow: a reply from
// target to SNAT port sport is restored to vip → client.
func addRNAT(t testing.TB, f *importFixture, target netip.AddrPort, sport uint16, client, vip netip.AddrPort) {
	rk := make([]byte, 12)
	copy(rk, target.Addr().AsSlice())
	binary.BigEndian.PutUint16(rk[4:], target.Port())
	binary.BigEndian.PutUint16(rk[6:], sport)
	rk[8] = uint8(TCP)
	rv := make([]byte, 32)
	copy(rv, []byte{192, 0, 2, 1})
	copy(rv[4:], client.Addr().AsSlice())
	copy(rv[8:], vip.Addr().AsSlice())
	binary.BigEndian.PutUint16(rv[12:], client.Port())
	binary.BigEndian.PutUint16(rv[14:], vip.Port())
	rv[16] = uint8(TCP)
	must(t, f.d.coll.Maps["rnat"].Update(rk, rv, ebpf.UpdateAny))
}

// TestNATReply: a target's reply to the SNAT address leaves restored to
// clusterset IP:port → client:port, with IP and TCP checksums that verify
// — from a target on another port than the clusterset one, and from one on
// the same port (no port changes: the program skips the ports' checksum
// update then).
func TestNATReply(t *testing.T) {
	f := newImportFixture(t, 1)
	client := netip.MustParseAddrPort("10.1.0.2:40000")
	snat, other := addNATEntry(t, f, client)
	same := netip.AddrPortFrom(other.Addr(), f.vip.Port())
	addRNAT(t, f, same, client.Port(), client, f.vip)
	for _, c := range []struct {
		target  netip.AddrPort
		payload int
	}{{other, 0}, {other, 1}, {other, 1400}, {same, 0}, {same, 1}, {same, 1400}} {
		target, payload := c.target, c.payload
		pkt := frame(TCP, target, netip.AddrPortFrom(snat, 40000), false, payload)
		for i := range payload {
			pkt[54+i] = byte(i * 7)
		}
		binary.BigEndian.PutUint16(pkt[34+16:], tcpChecksum(pkt[14:]))
		out := make([]byte, len(pkt)+64)
		ret, err := f.d.Program("lan_ingress").Run(&ebpf.RunOptions{Data: pkt, DataOut: out})
		must(t, err)
		if ret != tcActRedirect {
			t.Fatalf("payload %d: verdict %d, want redirect", payload, ret)
		}
		out = out[:len(pkt)]
		ip := out[14:]
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(ip[20:]))
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(ip[22:]))
		if src != f.vip || dst != client {
			t.Errorf("payload %d: reply %v → %v, want %v → %v", payload, src, dst, f.vip, client)
		}
		if ipChecksum(ip[:20]) != 0 {
			t.Errorf("payload %d: IP checksum does not verify", payload)
		}
		if tcpChecksum(ip) != 0 {
			t.Errorf("payload %d: TCP checksum does not verify", payload)
		}
	}
}

// TestICMPFragNeeded: a "fragmentation needed" error that a router on the
// target's side sends to the SNAT address about a NAT flow reaches the
// client as an error from the clusterset IP about its own packet — outer
// and quoted addresses and ports restored, the MTU kept, every checksum
// valid — so path-MTU discovery works through the tunnel.
func TestICMPFragNeeded(t *testing.T) {
	f := newImportFixture(t, 1)
	client := netip.MustParseAddrPort("10.1.0.2:40000")
	snat, target := addNATEntry(t, f, client)
	router := netip.MustParseAddr("10.2.0.9")
	// The quoted packet: the first 28 bytes of what the gateway sent.
	quoted := frame(TCP, netip.AddrPortFrom(snat, 40000), target, false, 1400)[14 : 14+28]
	pkt := make([]byte, 14+20+8+len(quoted))
	binary.BigEndian.PutUint16(pkt[12:], 0x0800)
	ip := pkt[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 1
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	copy(ip[12:], router.AsSlice())
	copy(ip[16:], snat.AsSlice())
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:20]))
	icmp := ip[20:]
	icmp[0], icmp[1] = 3, 4 // destination unreachable, fragmentation needed
	binary.BigEndian.PutUint16(icmp[6:], 1400)
	copy(icmp[8:], quoted)
	binary.BigEndian.PutUint16(icmp[2:], ipChecksum(icmp))

	out := make([]byte, len(pkt)+64)
	ret, err := f.d.Program("lan_ingress").Run(&ebpf.RunOptions{Data: pkt, DataOut: out})
	must(t, err)
	if ret != tcActRedirect {
		t.Fatalf("verdict %d, want redirect", ret)
	}
	out = out[:len(pkt)]
	oip := out[14:]
	oicmp := oip[20:]
	in := oicmp[8:]
	addr := func(b []byte) netip.Addr { return netip.AddrFrom4([4]byte(b[:4])) }
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"outer source", addr(oip[12:]), f.vip.Addr()},
		{"outer destination", addr(oip[16:]), client.Addr()},
		{"quoted source", netip.AddrPortFrom(addr(in[12:]), binary.BigEndian.Uint16(in[20:])), client},
		{"quoted destination", netip.AddrPortFrom(addr(in[16:]), binary.BigEndian.Uint16(in[22:])), f.vip},
		{"MTU", binary.BigEndian.Uint16(oicmp[6:]), uint16(1400)},
		{"outer IP checksum", ipChecksum(oip[:20]), uint16(0)},
		{"ICMP checksum", ipChecksum(oicmp), uint16(0)},
		{"quoted IP checksum", ipChecksum(in[:20]), uint16(0)},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	cs, err := f.d.Counters()
	must(t, err)
	if cs["icmp_error_tx_packets"] != 1 {
		t.Errorf("icmp_error_tx_packets %d, want 1", cs["icmp_error_tx_packets"])
	}
}

// TestEgressPolicy: a compiled AccessPolicy decides new import flows in the
// kernel, and drops are counted per rule.
func TestEgressPolicy(t *testing.T) {
	f := newImportFixture(t, 2)
	ev, err := policy.Compile([]*catalog.AccessPolicy{
		{Metadata: catalog.ObjectMeta{Name: "deny-batch"}, Spec: catalog.AccessPolicySpec{Priority: 10, Action: catalog.Deny,
			From: catalog.Source{Namespaces: []string{"batch"}}}},
		{Metadata: catalog.ObjectMeta{Name: "allow-all"}, Spec: catalog.AccessPolicySpec{Priority: 20, Action: catalog.Allow}},
	})
	must(t, err)
	entries, rules, err := CompilePolicy(ev, []ClusterSources{{ID: 0, Name: "a", DefaultNamespace: "default", Sources: []Source{
		{Prefix: netip.MustParsePrefix("10.2.0.0/16"), Namespace: "batch"},
		{Prefix: netip.MustParsePrefix("10.2.3.0/24"), Namespace: "web"}, // shadowed by the /16 above
		{Prefix: netip.MustParsePrefix("10.3.0.0/16"), Namespace: "web"},
	}}}, []ServiceRef{{ID: 1, Dest: policy.Destination{Export: "echo", Namespace: "default"}}})
	must(t, err)
	must(t, f.d.SetPolicy(entries))
	prog := f.d.Program("lan_ingress")
	for _, c := range []struct {
		client string
		want   uint32
	}{
		{"10.2.0.5:1000", tcActShot},
		{"10.2.3.4:1000", tcActShot}, // first match: batch, as the gateway decides
		{"10.3.0.5:1000", tcActRedirect},
		{"10.9.0.5:1000", tcActRedirect},
	} {
		if got := run(t, prog, frame(TCP, netip.MustParseAddrPort(c.client), f.vip, true, 0)); got != c.want {
			t.Errorf("client %s: verdict %d, want %d", c.client, got, c.want)
		}
	}
	drops, err := f.d.RuleDrops(len(rules))
	must(t, err)
	for i, name := range rules {
		want := uint64(0)
		if name == "deny-batch" {
			want = 2
		}
		if drops[i] != want {
			t.Errorf("rule %d (%q): %d drops, want %d", i, name, drops[i], want)
		}
	}
}

// TestMSSClamp: a SYN toward an import leaves with its MSS lowered to the
// configured clamp and a checksum that still verifies.
func TestMSSClamp(t *testing.T) {
	f := newImportFixture(t, 1)
	client := netip.MustParseAddrPort("10.1.0.2:40000")
	gw := f.addrs[f.gws[0]]
	// The programs' MSS is 1410 (a 1500-byte underlay); a peer's entry
	// may name its own, sized for the route to it, smaller or larger.
	for _, c := range []struct{ peerMSS, option, want uint16 }{
		{0, 1460, 1410},
		{1200, 1460, 1200},
		{8910, 8960, 8910},
		{8910, 1460, 1460},
	} {
		must(t, f.d.SetPeers(map[netip.Addr]Peer{gw: {Cluster: 1, Alive: true, MSS: c.peerMSS}}))
		pkt := frame(TCP, client, f.vip, true, 0)
		// Add an MSS option: data offset 6 words.
		pkt = append(pkt, 2, 4, byte(c.option>>8), byte(c.option))
		pkt[14+20+12] = 6 << 4
		binary.BigEndian.PutUint16(pkt[14+2:], 44)
		binary.BigEndian.PutUint16(pkt[14+10:], 0)
		binary.BigEndian.PutUint16(pkt[14+10:], ipChecksum(pkt[14:34]))
		binary.BigEndian.PutUint16(pkt[34+16:], tcpChecksum(pkt[14:]))
		out := make([]byte, len(pkt)+64)
		ret, err := f.d.Program("lan_ingress").Run(&ebpf.RunOptions{Data: pkt, DataOut: out})
		must(t, err)
		if ret != tcActRedirect {
			t.Fatalf("verdict %d", ret)
		}
		out = out[:len(pkt)]
		if mss := binary.BigEndian.Uint16(out[34+22:]); mss != c.want {
			t.Errorf("peer MSS %d, SYN's %d: MSS %d after clamping, want %d", c.peerMSS, c.option, mss, c.want)
		}
		if tcpChecksum(out[14:]) != 0 {
			t.Errorf("peer MSS %d: TCP checksum does not verify after clamping", c.peerMSS)
		}
	}
}

// tcpChecksum returns the checksum over the pseudo-header and segment of
// an IPv4 packet: 0 when the segment's checksum field is right, the value
// to store when that field is zero.
func tcpChecksum(ip []byte) uint16 {
	seg := ip[20:binary.BigEndian.Uint16(ip[2:])]
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(ip[12:20])
	sum += uint32(ip[9]) + uint32(len(seg))
	add(seg)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// BenchmarkLanIngress reports lan_ingress's cost per packet, as
// BPF_PROG_TEST_RUN times it in the kernel over 100 000 repetitions: a
// packet of an established import flow, a target's reply translated back
// through NAT, and a packet the program passes untouched, measured in the
// same run.
//
// Repeated runs reuse one packet, which a NAT rewrite changes: the reply is
// timed with two reverse NAT entries that translate into each other (the
// client's address is the SNAT address, so the restored packet is itself a
// reply to the SNAT address), so every repetition does the full NAT work.
func BenchmarkLanIngress(b *testing.B) {
	f := newImportFixture(b, 3)
	prog := f.d.Program("lan_ingress")
	client := netip.MustParseAddrPort("10.1.0.2:40000")
	flow := frame(TCP, client, f.vip, false, 1400)
	other := frame(TCP, client, netip.MustParseAddrPort("10.1.0.3:80"), false, 1400)
	if ret := run(b, prog, flow); ret != tcActRedirect {
		b.Fatalf("verdict %d", ret)
	}
	snat, target := addNATEntry(b, f, netip.AddrPortFrom(netip.MustParseAddr("10.2.0.254"), 40000))
	snatClient := netip.AddrPortFrom(snat, 40000)
	addRNAT(b, f, f.vip, 40000, snatClient, target)
	reply := frame(TCP, target, snatClient, false, 1400)
	for range 2 { // there and back
		out := make([]byte, len(reply))
		ret, err := prog.Run(&ebpf.RunOptions{Data: reply, DataOut: out})
		must(b, err)
		if ret != tcActRedirect {
			b.Fatalf("reply verdict %d", ret)
		}
		reply = out
	}
	if got := netip.AddrFrom4([4]byte(reply[14+12 : 14+16])); got != target.Addr() {
		b.Fatalf("ping-pong NAT: source %v after two runs, want %v", got, target.Addr())
	}
	var fwd, rep, pass float64
	for b.Loop() {
		_, d1, err := prog.Benchmark(flow, 100_000, nil)
		must(b, err)
		_, d2, err := prog.Benchmark(other, 100_000, nil)
		must(b, err)
		r3, d3, err := prog.Benchmark(reply, 100_000, nil)
		must(b, err)
		if r3 != tcActRedirect {
			b.Fatalf("reply verdict %d in the benchmark", r3)
		}
		fwd, pass, rep = float64(d1.Nanoseconds()), float64(d2.Nanoseconds()), float64(d3.Nanoseconds())
	}
	b.Logf("load average: %s", loadavg())
	b.ReportMetric(fwd, "ns/import-packet")
	b.ReportMetric(rep, "ns/nat-reply-packet")
	b.ReportMetric(pass, "ns/passed-packet")
}

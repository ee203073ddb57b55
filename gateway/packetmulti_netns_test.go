package gateway_test

import (
	byteorder "encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/internal/testenv"
)

// nameServer answers with its cluster's name: HTTP on ADDR:8080 (the body
// is the name) and UDP on ADDR:5353 (the name, a space, the datagram).
// The client side sends one datagram from a fixed source port, so that
// repeated runs are one flow, and prints the answer's first word:
//
//	serve NAME ADDR
//	ask ADDR PORT SPORT
const nameServer = `
import socket, sys, threading, http.server
if sys.argv[1] == "serve":
    name, addr = sys.argv[2].encode(), sys.argv[3]
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((addr, 5353))
    def udp():
        while True:
            d, p = u.recvfrom(65535)
            u.sendto(name + b" " + d, p)
    threading.Thread(target=udp, daemon=True).start()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(name)))
            self.end_headers()
            self.wfile.write(name)
        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer((addr, 8080), H)
    print("listening", flush=True)
    srv.serve_forever()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[4])))
s.settimeout(1)
s.connect((sys.argv[2], int(sys.argv[3])))
s.send(b"hello")
try:
    print(s.recv(65535).split()[0].decode())
except socket.timeout:
    print("timeout")
`

// multiEnv is three clusters: a imports "echo" at packetVIP (TCP 80, UDP
// 5353) from clusters c and b, in that order of preference; b and c each
// export it with a target of their own that answers with its cluster's
// name. Every gateway is configured for the packet mode toward its peers.
type multiEnv struct {
	*packetEnv
	gc, sc string
	c      *gw
}

const cUplink = "wanc"

func setupPacketMulti(t *testing.T) *multiEnv {
	pe, id := startPacketTest(t, "pktmc")
	e := &multiEnv{packetEnv: pe}
	e.ca, e.ga = testenv.Netns(t, id+"-ca"), testenv.Netns(t, id+"-ga")
	e.gb, e.sb = testenv.Netns(t, id+"-gb"), testenv.Netns(t, id+"-sb")
	e.gc, e.sc = testenv.Netns(t, id+"-gc"), testenv.Netns(t, id+"-sc")
	ip := func(args ...string) { testenv.Run(t, "ip", args...) }
	ip("-n", e.ga, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", e.ca)
	ip("-n", e.ga, "link", "add", "wan", "type", "veth", "peer", "name", "wan", "netns", e.gb)
	ip("-n", e.ga, "link", "add", cUplink, "type", "veth", "peer", "name", "wan", "netns", e.gc)
	ip("-n", e.gb, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", e.sb)
	ip("-n", e.gc, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", e.sc)
	for _, a := range []struct{ ns, dev, addr string }{
		{e.ca, "eth0", "10.1.0.2/24"}, {e.ga, "lan", "10.1.0.1/24"}, {e.ga, "lan", "10.1.0.254/24"},
		{e.ga, "wan", "192.0.2.1/24"}, {e.gb, "wan", "192.0.2.2/24"},
		{e.ga, cUplink, "192.0.4.1/24"}, {e.gc, "wan", "192.0.4.2/24"},
		{e.gb, "lan", "10.2.0.1/24"}, {e.gb, "lan", "10.2.0.254/24"}, // second addresses: SNAT
		{e.gc, "lan", "10.3.0.1/24"}, {e.gc, "lan", "10.3.0.254/24"},
		{e.sb, "eth0", "10.2.0.2/24"}, {e.sc, "eth0", "10.3.0.2/24"},
	} {
		ip("-n", a.ns, "addr", "add", a.addr, "dev", a.dev)
		ip("-n", a.ns, "link", "set", a.dev, "up")
	}
	for _, ns := range []string{e.ca, e.ga, e.gb, e.sb, e.gc, e.sc} {
		ip("-n", ns, "link", "set", "lo", "up")
	}
	ip("-n", e.ca, "route", "add", "default", "via", "10.1.0.1")
	ip("-n", e.ga, "route", "add", "local", "10.96.0.0/24", "dev", "lo")
	// a has one address its peers know (192.0.2.1): its tunnel packets to
	// c leave with it, and c routes it back over its own link.
	ip("-n", e.ga, "route", "replace", "192.0.4.0/24", "dev", cUplink, "src", "192.0.2.1")
	ip("-n", e.gc, "route", "add", "192.0.2.1/32", "dev", "wan")

	fabric := filepath.Join(tmpDir, "fabric")
	issueFabric(t, fabric)
	if out, err := exec.Command(binary, "fabric", "issue", "c", "--dir", fabric).CombinedOutput(); err != nil {
		t.Fatalf("strait fabric issue c: %v\n%s", err, out)
	}
	script := filepath.Join(tmpDir, "name.py")
	if err := os.WriteFile(script, []byte(nameServer), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ ns, name, addr string }{{e.sb, "b", "10.2.0.2"}, {e.sc, "c", "10.3.0.2"}} {
		p := startIn(t, s.ns, "python3", script, "serve", s.name, s.addr)
		for deadline := time.Now().Add(patience); !strings.Contains(p.out.String(), "listening"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("server of %s did not start: %s", s.name, p.out.String())
			}
		}
	}

	allowAll := policyYAML("allow-all", 1000, "allow", "")
	resA := peerYAML("b", "192.0.2.2:4443") + peerYAML("c", "192.0.4.2:4443") + allowAll + `apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: echo, namespace: default}
spec:
  ips: [` + packetVIP + `]
  ports: [{name: http, protocol: TCP, port: 80}, {name: dns, protocol: UDP, port: 5353}]
  clusters: [{cluster: c}, {cluster: b}]
`
	export := func(target string) string {
		return peerYAML("a", "192.0.2.1:4443") + allowAll + `apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: echo, namespace: default}
spec:
  target: ` + target + `:8080
  ports: [{name: http, protocol: TCP, port: 80}, {name: dns, protocol: UDP, port: 5353, target: "` + target + `:5353"}]
`
	}
	e.a = &gw{t: t, cluster: "a", netns: e.ga, addr: "192.0.2.1"}
	e.b = &gw{t: t, cluster: "b", netns: e.gb, addr: "192.0.2.2"}
	e.c = &gw{t: t, cluster: "c", netns: e.gc, addr: "192.0.4.2"}
	for _, g := range []struct {
		g          *gw
		res, peers string
		snat       string
	}{
		{e.a, resA, "b: {data-plane: packet}, c: {data-plane: packet}", "10.1.0.254"},
		{e.b, export("10.2.0.2"), "a: {data-plane: packet}", "10.2.0.254"},
		{e.c, export("10.3.0.2"), "a: {data-plane: packet}", "10.3.0.254"},
	} {
		resFile := filepath.Join(tmpDir, g.g.cluster+"-resources.yaml")
		if err := os.WriteFile(resFile, []byte(g.res), 0o644); err != nil {
			t.Fatal(err)
		}
		g.g.socket = filepath.Join(tmpDir, g.g.cluster+".sock")
		g.g.config = filepath.Join(tmpDir, g.g.cluster+"-gateway.yaml")
		cfg := fmt.Sprintf(`sources: [{cidr: 10.1.0.2/32, namespace: web}]
cluster: %s
identity: {dir: %s}
listen: %s:4443
admin: %s
state: %s
metrics: %s
intercept: listeners
preconnect: -1
resources: [%s]
peers: {%s}
packet: {lan: lan, snat: %s, pin-root: %s, name: %s}
`, g.g.cluster, fabric, g.g.addr, g.g.socket, filepath.Join(tmpDir, g.g.cluster+"-state.json"), metricsAddr, resFile,
			g.peers, g.snat, e.pins, g.g.netns)
		if err := os.WriteFile(g.g.config, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		g.g.start(t)
	}
	t.Cleanup(func() {
		for _, ns := range []string{e.ga, e.gb, e.gc} {
			_ = exec.Command("ip", "netns", "exec", ns, binary, "packet", "teardown", "--name", ns, "--pin-root", e.pins).Run()
		}
	})
	e.b.waitLive(t, "a", 0)
	e.c.waitLive(t, "a", 0)
	e.a.waitLive(t, "b", 1)
	e.a.waitLive(t, "c", 1)
	return e
}

// who is the cluster whose target answered a new TCP flow (a curl, its
// own source port) to the import.
func (e *multiEnv) who(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", e.ca, "curl", "-sS", "--fail", "--max-time", curlMax,
		"http://"+packetVIP+":80/").CombinedOutput()
	if err != nil {
		t.Fatalf("curl over the import: %v: %.200q", err, out)
	}
	return string(out)
}

// whoUDP is the cluster whose target answers a datagram from the client's
// source port sport (the same flow each time), retried while lost.
func (e *multiEnv) whoUDP(t *testing.T, sport int) string {
	t.Helper()
	var out string
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); {
		b, _ := exec.Command("ip", "netns", "exec", e.ca, "python3", filepath.Join(tmpDir, "name.py"),
			"ask", packetVIP, "5353", fmt.Sprint(sport)).CombinedOutput()
		if out = strings.TrimSpace(string(b)); out == "b" || out == "c" {
			return out
		}
	}
	t.Fatalf("UDP from port %d over the import: %s", sport, out)
	return ""
}

// importTable is the table slot a's imports map gives the import's TCP
// port.
func (e *multiEnv) importTable(t *testing.T) uint32 {
	t.Helper()
	return importTableIn(t, e.pinnedMap(t, e.ga, "imports"))
}

func importTableIn(t *testing.T, m *ebpf.Map) uint32 {
	t.Helper()
	// svc_key: address and port in network order, protocol, pad.
	var k [8]byte
	vip := netip.MustParseAddr(packetVIP).As4()
	copy(k[:4], vip[:])
	byteorder.BigEndian.PutUint16(k[4:], 80)
	k[6] = 6
	var v [8]byte // import_val: service ID, table
	if err := m.Lookup(k, &v); err != nil {
		t.Fatalf("a's imports map has no entry for %s:80/TCP: %v", packetVIP, err)
	}
	return byteorder.NativeEndian.Uint32(v[4:])
}

// waitImportTable polls importTable every millisecond until cond holds
// and returns when it saw it so.
func (e *multiEnv) waitImportTable(t *testing.T, cond func(uint32) bool, what string) time.Time {
	t.Helper()
	m := e.pinnedMap(t, e.ga, "imports")
	for deadline := time.Now().Add(patience); ; time.Sleep(time.Millisecond) {
		now := time.Now()
		if cond(importTableIn(t, m)) {
			return now
		}
		if now.After(deadline) {
			t.Fatalf("%s: not after %v", what, patience)
		}
	}
}

// flows asks n new TCP flows and counts the answers per cluster.
func (e *multiEnv) flows(t *testing.T, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		got[e.who(t)]++
	}
	return got
}

// TestPacketModeMultiCluster: an import of two exporting clusters, c then
// b in order of preference, carried by the packet mode as the stream
// mode carries it (docs/packet.md, "Imports of several clusters"): new
// TCP and UDP flows go to c while its gateway lives; c's uplink down, a's
// prober takes c out and new flows go to b, and c's pinned UDP flow moves
// to b; back up, new flows go to c again while the flow that moved stays
// on b (its gateway lives). The programs carry all of it: a's stream
// mode opens no stream.
func TestPacketModeMultiCluster(t *testing.T) {
	e := setupPacketMulti(t)
	active := func(d gateway.PeerDataPlane) bool { return d.Active && d.Imports }
	dataPlane(t, e.a, "b", active, "packet mode from b on a")
	dataPlane(t, e.a, "c", active, "packet mode from c on a")
	exports := func(d gateway.PeerDataPlane) bool { return d.Active && d.Exports }
	dataPlane(t, e.b, "a", exports, "a's offer heard on b")
	dataPlane(t, e.c, "a", exports, "a's offer heard on c")
	const (
		answersB = `strait_packet_probe_answers_total{gateway="192.0.2.2:4443",peer="b"}`
		answersC = `strait_packet_probe_answers_total{gateway="192.0.4.2:4443",peer="c"}`
		upC      = `strait_packet_gateway_up{gateway="192.0.4.2:4443",peer="c"}`
		streams  = `strait_streams_total{point="egress"}`
	)
	e.a.waitMetric(t, answersB, func(v float64) bool { return v > 0 }, "b's programs answer a's probes")
	e.a.waitMetric(t, answersC, func(v float64) bool { return v > 0 }, "c's programs answer a's probes")
	streams0 := e.a.metric(t, streams)
	tx0 := e.a.metric(t, packetMetrA)

	// c is preferred: every new flow goes to it.
	if got := e.flows(t, 20); got["c"] != 20 {
		t.Fatalf("20 new flows with both clusters up: %v, want all on c", got)
	}
	const moved, stays = 41001, 41002
	if w := e.whoUDP(t, moved); w != "c" {
		t.Fatalf("UDP flow from %d answered by %s, want c", moved, w)
	}
	if got := e.a.metric(t, packetMetrA); got == tx0 {
		t.Fatalf("a's programs sent nothing into the tunnel")
	}

	onC := e.importTable(t)
	downAt := time.Now()
	testenv.Run(t, "ip", "-n", e.ga, "link", "set", cUplink, "down")
	ran := time.Since(downAt)
	sw := e.waitImportTable(t, func(tb uint32) bool { return tb != onC }, "the import moved to b's table after c's uplink died")
	d := e.waitPeerAlive(t, e.c.addr, false, "c's gateway dead in a's maps after its uplink died")
	// Figures for the log, not thresholds.
	t.Logf("c's uplink down: the import on b's table %v later, c's gateway dead in a's peers map %v later (the command took %v; load %s)",
		sw.Sub(downAt).Round(100*time.Microsecond), d.Sub(downAt).Round(100*time.Microsecond), ran.Round(100*time.Microsecond), loadavg())
	if v := e.a.metric(t, upC); v != 0 {
		t.Errorf("%s = %v with c's uplink down", upC, v)
	}
	if got := e.flows(t, 20); got["b"] != 20 {
		t.Errorf("20 new flows with c's uplink down: %v, want all on b", got)
	}
	if w := e.whoUDP(t, moved); w != "b" {
		t.Errorf("the UDP flow pinned to c answered by %s with c's uplink down, want b", w)
	}
	if gw := e.pinnedFlows(t)[moved]; gw != netip.MustParseAddr(e.b.addr) {
		t.Errorf("the UDP flow from %d is pinned to %v, want b's gateway", moved, gw)
	}

	testenv.Run(t, "ip", "-n", e.ga, "link", "set", cUplink, "up")
	// Down took the device's routes, the source-address one included.
	testenv.Run(t, "ip", "-n", e.ga, "route", "replace", "192.0.4.0/24", "dev", cUplink, "src", "192.0.2.1")
	e.waitPeerAlive(t, e.c.addr, true, "c's gateway back in a's maps")
	e.waitImportTable(t, func(tb uint32) bool { return tb == onC }, "the import back on c's table")
	// The import's entry names c's table again in the write that revives
	// c; poll a few flows only to bound a slow host's write.
	for i := 0; e.who(t) != "c"; i++ {
		if i == 20 {
			t.Fatalf("20 new flows after c came back, none on c")
		}
	}
	if got := e.flows(t, 10); got["c"] != 10 {
		t.Errorf("10 new flows after c came back: %v, want all on c", got)
	}
	if w := e.whoUDP(t, stays); w != "c" {
		t.Errorf("a new UDP flow after c came back answered by %s, want c", w)
	}
	if w := e.whoUDP(t, moved); w != "b" {
		t.Errorf("the UDP flow that moved to b answered by %s after c came back: a flow moves only when its gateway dies", w)
	}
	if got := e.a.metric(t, streams); got != streams0 {
		t.Errorf("a's stream mode opened %v streams: the programs should carry the import", got-streams0)
	}

	// STRAIT_PACKET_FAILOVER_REPS=N repeats the uplink part for figures.
	reps := 1
	if v := os.Getenv("STRAIT_PACKET_FAILOVER_REPS"); v != "" {
		fmt.Sscan(v, &reps)
	}
	took := []time.Duration{sw.Sub(downAt)}
	for rep := 1; rep < reps; rep++ {
		downAt := time.Now()
		testenv.Run(t, "ip", "-n", e.ga, "link", "set", cUplink, "down")
		sw := e.waitImportTable(t, func(tb uint32) bool { return tb != onC }, "the import moved to b's table")
		took = append(took, sw.Sub(downAt))
		e.waitPeerAlive(t, e.c.addr, false, "c's gateway dead in a's maps")
		if got := e.flows(t, 3); got["b"] != 3 {
			t.Errorf("repetition %d: 3 new flows with c's uplink down: %v, want all on b", rep+1, got)
		}
		testenv.Run(t, "ip", "-n", e.ga, "link", "set", cUplink, "up")
		testenv.Run(t, "ip", "-n", e.ga, "route", "replace", "192.0.4.0/24", "dev", cUplink, "src", "192.0.2.1")
		e.waitPeerAlive(t, e.c.addr, true, "c's gateway back in a's maps")
		e.waitImportTable(t, func(tb uint32) bool { return tb == onC }, "the import back on c's table")
	}
	if len(took) > 1 {
		slices.Sort(took)
		q := func(p float64) time.Duration {
			return took[int(p*float64(len(took)-1)+0.5)].Round(100 * time.Microsecond)
		}
		t.Logf("uplink down → the import on b's table, %d repetitions: median %v, p95 %v, max %v (load %s); all: %v",
			len(took), q(0.5), q(0.95), took[len(took)-1].Round(100*time.Microsecond), loadavg(), took)
	}

	// c's Peer resource on a says stream: the programs cannot reach c, so
	// the whole import goes back to streams, which prefer c as before —
	// once a's sessions to c live again (the uplink's last fall may have
	// ended them; the probes revived c in the maps, not the sessions).
	e.a.waitMetric(t, `strait_peer_gateway_up{gateway="192.0.4.2:4443",peer="c"}`, func(v float64) bool { return v == 1 },
		"a's sessions to c live")
	e.a.apply(t, "apiVersion: strait.dev/v1alpha1\nkind: Peer\nmetadata: {name: c}\nspec: {gateways: [\"192.0.4.2:4443\"], dataPlane: stream}\n")
	dataPlane(t, e.a, "c", func(d gateway.PeerDataPlane) bool { return !d.Active && d.Configured == gateway.DataPlaneStream },
		"a's data plane for c back to streams by its Peer resource")
	dataPlane(t, e.a, "b", active, "packet mode from b on a, c on streams")
	// The import's entry leaves a's maps in the write that follows.
	for i := 0; e.a.metric(t, streams) == streams0; i++ {
		if i == 20 {
			t.Fatalf("20 new flows with c on streams, none carried by a's stream mode")
		}
		e.who(t)
	}
	tx := e.a.metric(t, packetMetrA)
	s0 := e.a.metric(t, streams)
	if got := e.flows(t, 10); got["c"] != 10 {
		t.Errorf("10 new flows with c on streams: %v, want all on c (the stream mode's first cluster)", got)
	}
	if got := e.a.metric(t, streams); got != s0+10 {
		t.Errorf("a's stream mode carried %v of 10 new flows with c on streams", got-s0)
	}
	if got := e.a.metric(t, packetMetrA); got != tx {
		t.Errorf("a's programs sent %v packets into the tunnel with the import on streams", got-tx)
	}
}

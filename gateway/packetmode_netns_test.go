package gateway_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/health"
	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/packet"
)

// udpEcho is a UDP echo server and client on real sockets, run with
// python3:
//
//	echo ADDR PORT        echo every datagram back
//	ask ADDR PORT SIZE    send SIZE bytes on a connected socket and print
//	                      "ok" when they come back, else what happened
//	send ADDR PORT HEX    the same with the bytes HEX
const udpEcho = `
import socket, sys, os
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if sys.argv[1] == "echo":
    s.bind((sys.argv[2], int(sys.argv[3])))
    print("listening", flush=True)
    while True:
        data, peer = s.recvfrom(65535)
        s.sendto(data, peer)
s.settimeout(2)
s.connect((sys.argv[2], int(sys.argv[3])))
data = bytes.fromhex(sys.argv[4]) if sys.argv[1] == "send" else os.urandom(int(sys.argv[4]))
try:
    s.send(data)
    print("ok" if s.recv(65535) == data else "mismatch")
except ConnectionRefusedError:
    print("refused")
except socket.timeout:
    print("timeout")
`

// packetEnv is two clusters as four namespaces — a client node and a
// gateway node in cluster a, a gateway node and a server node in cluster
// b — with a gateway process on each gateway node. a imports b's export
// "echo" at the clusterset IP 10.96.0.10, TCP port 80 and UDP port 5353.
type packetEnv struct {
	ca, ga, gb, sb string
	a, b           *gw
	pins           string
	// With a second exporting gateway: gb2 (192.0.3.2, its own WAN link to
	// ga and LAN link to sb) and its process.
	gb2 string
	b2  *gw
}

const (
	packetVIP   = "10.96.0.10"
	packetMetrA = "strait_packet_packets_total{direction=\"import_tx\"}"
	packetMetrB = "strait_packet_packets_total{direction=\"export_rx\"}"
)

// startPacketTest checks what the packet-mode tests need, builds the
// binary, makes tmpDir and returns an environment with its BPF filesystem
// and a unique prefix for its namespaces.
func startPacketTest(t *testing.T, prefix string) (*packetEnv, string) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	binary = testenv.StraitBinary(t)
	var err error
	if tmpDir, err = os.MkdirTemp("", testenv.UniqueName(prefix)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmpDir) })
	return &packetEnv{pins: testenv.BPFFS(t)}, testenv.UniqueName(prefix)
}

// setupPacket starts the clusters with a's data-plane for b set to
// modeA and b's for a to modeB; twoB adds a second gateway to cluster b.
func setupPacket(t *testing.T, modeA, modeB string, twoB bool) *packetEnv {
	return setupPacketWith(t, modeA, modeB, twoB, "")
}

// setupPacketWith is setupPacket with extra fields for a's packet section
// (", probe-misses: 10").
func setupPacketWith(t *testing.T, modeA, modeB string, twoB bool, packetA string) *packetEnv {
	e, id := startPacketTest(t, "pktgw")
	e.ca, e.ga = testenv.Netns(t, id+"-ca"), testenv.Netns(t, id+"-ga")
	e.gb, e.sb = testenv.Netns(t, id+"-gb"), testenv.Netns(t, id+"-sb")
	ip := func(args ...string) { testenv.Run(t, "ip", args...) }
	ip("-n", e.ga, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", e.ca)
	ip("-n", e.ga, "link", "add", "wan", "type", "veth", "peer", "name", "wan", "netns", e.gb)
	ip("-n", e.gb, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", e.sb)
	for _, a := range []struct{ ns, dev, addr string }{
		{e.ca, "eth0", "10.1.0.2/24"}, {e.ga, "lan", "10.1.0.1/24"}, {e.ga, "lan", "10.1.0.254/24"},
		{e.ga, "wan", "192.0.2.1/24"}, {e.gb, "wan", "192.0.2.2/24"},
		{e.gb, "lan", "10.2.0.1/24"}, {e.gb, "lan", "10.2.0.254/24"}, // second addresses: SNAT
		{e.sb, "eth0", "10.2.0.2/24"},
	} {
		ip("-n", a.ns, "addr", "add", a.addr, "dev", a.dev)
		ip("-n", a.ns, "link", "set", a.dev, "up")
	}
	for _, ns := range []string{e.ca, e.ga, e.gb, e.sb} {
		ip("-n", ns, "link", "set", "lo", "up")
	}
	ip("-n", e.ca, "route", "add", "default", "via", "10.1.0.1")
	// The stream mode's listeners take the clusterset IPs as local
	// addresses; the packet mode's program takes their packets earlier.
	ip("-n", e.ga, "route", "add", "local", "10.96.0.0/24", "dev", "lo")
	peerB := `"192.0.2.2:4443"`
	if twoB {
		e.gb2 = testenv.Netns(t, id+"-gb2")
		ip("-n", e.ga, "link", "add", "wan2", "type", "veth", "peer", "name", "wan", "netns", e.gb2)
		ip("-n", e.gb2, "link", "add", "lan", "type", "veth", "peer", "name", "eth1", "netns", e.sb)
		for _, a := range []struct{ ns, dev, addr string }{
			{e.ga, "wan2", "192.0.3.1/24"}, {e.gb2, "wan", "192.0.3.2/24"},
			{e.gb2, "lan", "10.2.1.1/24"}, {e.gb2, "lan", "10.2.1.254/24"}, {e.sb, "eth1", "10.2.1.2/24"},
		} {
			ip("-n", a.ns, "addr", "add", a.addr, "dev", a.dev)
			ip("-n", a.ns, "link", "set", a.dev, "up")
		}
		// a's tunnel packets to gb2 leave with the address b's Peer
		// resource names for a (tunnel packets are accepted by source).
		ip("-n", e.ga, "route", "replace", "192.0.3.0/24", "dev", "wan2", "src", "192.0.2.1")
		ip("-n", e.gb2, "route", "add", "192.0.2.1/32", "dev", "wan")
		ip("-n", e.gb2, "route", "add", "10.2.0.2/32", "via", "10.2.1.2")
		peerB += `, "192.0.3.2:4443"`
	}

	fabric := filepath.Join(tmpDir, "fabric")
	issueFabric(t, fabric)
	srv := startIn(t, e.sb, binary, "app", "echo", "--listen", "10.2.0.2:8080")
	script := filepath.Join(tmpDir, "udp.py")
	if err := os.WriteFile(script, []byte(udpEcho), 0o644); err != nil {
		t.Fatal(err)
	}
	udp := startIn(t, e.sb, "python3", script, "echo", "10.2.0.2", "5353")
	for _, p := range []*proc{srv, udp} {
		for deadline := time.Now().Add(patience); !strings.Contains(p.out.String(), "listening"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("server did not start: %s", p.out.String())
			}
		}
	}

	allowAll := policyYAML("allow-all", 1000, "allow", "")
	resA := fmt.Sprintf("apiVersion: strait.dev/v1alpha1\nkind: Peer\nmetadata: {name: b}\nspec: {gateways: [%s]}\n---\n", peerB) + allowAll + `apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: echo, namespace: default}
spec:
  ips: [` + packetVIP + `]
  ports: [{name: http, protocol: TCP, port: 80}, {name: dns, protocol: UDP, port: 5353}]
  clusters: [{cluster: b}]
`
	resB := peerYAML("a", "192.0.2.1:4443") + allowAll + `apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: echo, namespace: default}
spec:
  target: 10.2.0.2:8080
  ports: [{name: http, protocol: TCP, port: 80}, {name: dns, protocol: UDP, port: 5353, target: "10.2.0.2:5353"}]
`
	e.a = &gw{t: t, cluster: "a", netns: e.ga, addr: "192.0.2.1"}
	e.b = &gw{t: t, cluster: "b", netns: e.gb, addr: "192.0.2.2"}
	type gwSpec struct {
		g          *gw
		file       string
		res, peer  string
		mode, snat string
		name       string
		extra      string
	}
	gws := []gwSpec{{e.a, "a", resA, "b", modeA, "10.1.0.254", e.ga, packetA}, {e.b, "b", resB, "a", modeB, "10.2.0.254", e.gb, ""}}
	if twoB {
		e.b2 = &gw{t: t, cluster: "b", netns: e.gb2, addr: "192.0.3.2"}
		gws = append(gws, gwSpec{e.b2, "b2", resB, "a", modeB, "10.2.1.254", e.gb2, ""})
	}
	for _, g := range gws {
		resFile := filepath.Join(tmpDir, g.file+"-resources.yaml")
		if err := os.WriteFile(resFile, []byte(g.res), 0o644); err != nil {
			t.Fatal(err)
		}
		g.g.socket = filepath.Join(tmpDir, g.file+".sock")
		g.g.config = filepath.Join(tmpDir, g.file+"-gateway.yaml")
		// The client is namespace web: b learns it from a's offer.
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
peers: {%s: {data-plane: %s}}
packet: {lan: lan, snat: %s, pin-root: %s, name: %s%s}
`, g.g.cluster, fabric, g.g.addr, g.g.socket, filepath.Join(tmpDir, g.file+"-state.json"), metricsAddr, resFile,
			g.peer, g.mode, g.snat, e.pins, g.name, g.extra)
		if err := os.WriteFile(g.g.config, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		g.g.start(t)
	}
	t.Cleanup(func() {
		// Best effort when the test failed before its own teardown.
		for _, ns := range []string{e.ga, e.gb, e.gb2} {
			if ns == "" {
				continue
			}
			_ = exec.Command("ip", "netns", "exec", ns, binary, "packet", "teardown", "--name", ns, "--pin-root", e.pins).Run()
		}
	})
	e.b.waitLive(t, "a", 0)
	if twoB {
		e.b2.waitLive(t, "a", 0)
	}
	e.a.waitLive(t, "b", 1)
	return e
}

// dataPlane waits until g's status shows peer's data plane as cond wants.
func dataPlane(t *testing.T, g *gw, peer string, cond func(gateway.PeerDataPlane) bool, what string) gateway.PeerDataPlane {
	t.Helper()
	var last gateway.PeerDataPlane
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		st, err := g.admin().Status()
		if err != nil {
			continue
		}
		for _, d := range st.DataPlanes {
			if d.Cluster == peer {
				if last = d; cond(d) {
					return d
				}
			}
		}
	}
	b, _ := json.Marshal(last)
	t.Fatalf("%s: %s's data plane for %s is %s after %v", what, g.cluster, peer, b, patience)
	return last
}

func (e *packetEnv) curl(t *testing.T, body string) {
	t.Helper()
	f := writeTemp(t, "body-*", body)
	out, err := exec.Command("ip", "netns", "exec", e.ca, "curl", "-sS", "--fail", "--max-time", curlMax, "-H", "Expect:",
		"--data-binary", "@"+f, "http://"+packetVIP+":80/").CombinedOutput()
	if err != nil || string(out) != body {
		t.Fatalf("echo over the import: %v, reply %.200q", err, out)
	}
}

// udp sends one datagram of size bytes to the import's UDP port until it
// comes back (a loaded host may lose one), bounded by patience.
func (e *packetEnv) udp(t *testing.T, size int) {
	t.Helper()
	var out string
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); {
		b, _ := exec.Command("ip", "netns", "exec", e.ca, "python3", filepath.Join(tmpDir, "udp.py"), "ask", packetVIP, "5353", fmt.Sprint(size)).CombinedOutput()
		if out = strings.TrimSpace(string(b)); out == "ok" {
			return
		}
	}
	t.Fatalf("UDP datagram of %d bytes over the import: %s", size, out)
}

// healthProbe sends a health probe (package health's format) from the
// client to addr on the packet mode's default probe port until the answer
// is want: "ok" (it came back unchanged) or "refused" (ICMP port
// unreachable), bounded by patience.
func (e *packetEnv) healthProbe(t *testing.T, addr, want string) {
	t.Helper()
	e.healthProbeAt(t, addr, packet.DefaultProbePort, want)
}

// healthProbeAt is healthProbe to port.
func (e *packetEnv) healthProbeAt(t *testing.T, addr string, port int, want string) {
	t.Helper()
	var out string
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if out = e.healthProbeOnce(addr, port); out == want {
			return
		}
	}
	t.Fatalf("health probe to %s:%d: %s after %v, want %s", addr, port, out, patience, want)
}

// healthProbeOnce sends one probe from the client to addr:port and returns
// the answer: "ok", "refused", or what went wrong.
func (e *packetEnv) healthProbeOnce(addr string, port int) string {
	b := make([]byte, health.ProbeLen)
	health.Encode(b, uint64(time.Now().UnixNano()))
	o, _ := exec.Command("ip", "netns", "exec", e.ca, "python3", filepath.Join(tmpDir, "udp.py"), "send", addr,
		fmt.Sprint(port), hex.EncodeToString(b)).CombinedOutput()
	return strings.TrimSpace(string(o))
}

// stop ends g with SIGTERM, as an operator does, and waits for it.
func stop(t *testing.T, g *gw) {
	t.Helper()
	_ = g.proc.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.proc.done:
	case <-time.After(patience):
		t.Fatalf("gateway %s did not stop on SIGTERM", g.cluster)
	}
}

// TestPacketMode: both gateways configured for the packet mode agree over
// their session, fill the maps from their resources, and the programs
// carry a client's TCP and UDP to the import's clusterset IP (their
// counters say so); forwarding goes on while the importing gateway is
// killed -9, and its node's programs answer health probes on its LAN
// address meanwhile; its restart adopts the pins, and a gateway stopped
// with --packet-teardown leaves no pin, no VXLAN device and nothing that
// answers health probes.
func TestPacketMode(t *testing.T) {
	e := setupPacket(t, gateway.DataPlanePacket, gateway.DataPlanePacket, false)
	active := func(d gateway.PeerDataPlane) bool { return d.Active }
	dataPlane(t, e.a, "b", active, "packet mode on a")
	dataPlane(t, e.b, "a", active, "packet mode on b")

	txA, rxB := e.a.metric(t, packetMetrA), e.b.metric(t, packetMetrB)
	e.curl(t, strings.Repeat("packet mode ", 20000))
	if got := e.a.metric(t, packetMetrA); got <= txA {
		t.Errorf("a's program sent no import packets into the tunnel: %s %v", packetMetrA, got)
	}
	if got := e.b.metric(t, packetMetrB); got <= rxB {
		t.Errorf("b's program translated no packets: %s %v", packetMetrB, got)
	}
	if n := e.a.metric(t, "strait_client_connections_total"); n != 0 {
		t.Errorf("a's stream mode accepted %v connections; the program should have carried them", n)
	}
	txA, rxB = e.a.metric(t, packetMetrA), e.b.metric(t, packetMetrB)
	e.udp(t, 1000)
	if got := e.a.metric(t, packetMetrA); got <= txA {
		t.Errorf("UDP: a's program sent no import packets: %v", got)
	}
	if got := e.b.metric(t, packetMetrB); got <= rxB {
		t.Errorf("UDP: b's program translated no packets: %v", got)
	}
	if n := e.b.metric(t, "strait_streams_total{point=\"ingress\"}"); n != 0 {
		t.Errorf("b's stream mode carried %v streams; the programs should have", n)
	}

	// A policy change reaches b's policy map: new flows from a's namespace
	// web are dropped and counted per policy, and flow again once it goes.
	deny := policyYAML("deny-web", 10, "deny", "  from: {clusters: [a], namespaces: [web]}\n  to: {exports: [echo]}\n")
	e.b.apply(t, deny)
	const denied = "strait_packet_policy_drops_total{policy=\"deny-web\"}"
	for deadline := time.Now().Add(patience); e.b.metric(t, denied) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no packet denied by deny-web on b after %v", patience)
		}
		f := writeTemp(t, "body-*", "denied")
		if out, err := exec.Command("ip", "netns", "exec", e.ca, "curl", "-sS", "--max-time", "1", "--data-binary", "@"+f,
			"http://"+packetVIP+":80/").CombinedOutput(); err == nil {
			t.Logf("answered before the policy reached the map: %q", out)
		}
	}
	if n := e.b.metric(t, "strait_packet_drops_total{reason=\"ingress_policy\"}"); n < 1 {
		t.Errorf("ingress policy drops %v, want at least 1", n)
	}
	e.b.delete(t, deny)
	e.curl(t, "allowed again")

	// The importing node's programs answer health probes to its LAN
	// address themselves (no process here has a health responder), also
	// while its gateway process is dead: what spreads a cluster's clients
	// over its gateways (the lab's nexthop watcher) keeps the node while
	// its programs forward (docs/packet.md, "Health").
	e.healthProbe(t, "10.1.0.1", "ok")
	// Only health probes, only to the node itself: other bytes on the
	// port reach the stack (which refuses them), and a probe a refuses to
	// forward to a routed address is not answered by a's programs either.
	for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
		b, _ := exec.Command("ip", "netns", "exec", e.ca, "python3", filepath.Join(tmpDir, "udp.py"), "ask", "10.1.0.1",
			fmt.Sprint(packet.DefaultProbePort), "12").CombinedOutput()
		out := strings.TrimSpace(string(b))
		if out == "refused" {
			break
		}
		if out == "ok" || time.Now().After(deadline) {
			t.Fatalf("12 bytes that are no health probe to a's probe port: %s, want refused", out)
		}
	}
	ip := func(args ...string) { testenv.Run(t, "ip", args...) }
	ip("-n", e.ga, "route", "add", "10.9.0.0/24", "via", "192.0.2.2")
	probe := make([]byte, health.ProbeLen)
	health.Encode(probe, 1)
	b, _ := exec.Command("ip", "netns", "exec", e.ca, "python3", filepath.Join(tmpDir, "udp.py"), "send", "10.9.0.1",
		fmt.Sprint(packet.DefaultProbePort), hex.EncodeToString(probe)).CombinedOutput()
	if out := strings.TrimSpace(string(b)); out == "ok" {
		t.Errorf("a health probe to 10.9.0.1, routed through a, was answered: a's programs answer only for a itself")
	}

	// kill -9: the pinned programs keep forwarding, the restart adopts them.
	e.a.proc.kill()
	e.healthProbe(t, "10.1.0.1", "ok")
	e.curl(t, "while the importing gateway is dead")
	e.a.start(t)
	e.a.waitLive(t, "b", 1)
	dataPlane(t, e.a, "b", active, "packet mode after restart")
	e.curl(t, "after the restart")
	e.udp(t, 1472)
	if !strings.Contains(e.a.proc.out.String(), "adopted pinned link") {
		t.Errorf("the restarted gateway did not adopt the pinned links:\n%s", e.a.proc.out.String())
	}
	// The exporting side: its only gateway's sessions end, and a keeps
	// sending to it (all of a peer's gateways dead takes none out).
	e.b.proc.kill()
	e.a.waitMetric(t, "strait_peer_sessions_live{peer=\"b\"}", func(v float64) bool { return v == 0 }, "b's sessions gone")
	e.curl(t, "while the exporting gateway is dead")
	e.udp(t, 100)
	e.b.start(t)
	e.b.waitLive(t, "a", 0)
	dataPlane(t, e.b, "a", active, "packet mode after b's restart")
	e.curl(t, "after b's restart")

	// The operator's teardown.
	for _, g := range []*gw{e.a, e.b} {
		g.proc.kill()
		g.proc = startOwned(t, g.t, g.netns, binary, "gateway", "--config", g.config, "--packet-teardown")
	}
	e.a.waitLive(t, "b", 1)
	for _, g := range []*gw{e.a, e.b} {
		stop(t, g)
		if !strings.Contains(g.proc.out.String(), "packet mode torn down") {
			t.Errorf("%s: no teardown in the log:\n%s", g.cluster, g.proc.out.String())
		}
	}
	for _, ns := range []string{e.ga, e.gb} {
		if _, err := os.Stat(filepath.Join(e.pins, ns)); !os.IsNotExist(err) {
			t.Errorf("%s's pin directory is still there (%v)", ns, err)
		}
		if out := testenv.Run(t, "ip", "-n", ns, "-o", "link", "show"); strings.Contains(out, "stv-") {
			t.Errorf("%s still has a VXLAN device:\n%s", ns, out)
		}
	}
	// Without programs nothing answers: the kernel refuses the probe.
	e.healthProbe(t, "10.1.0.1", "refused")
}

// TestPacketModeRefused: a gateway configured for the packet mode whose
// peer is configured for streams refuses the mode with the reason (log,
// status, metric) on both sides, and the stream mode serves the import.
func TestPacketModeRefused(t *testing.T) {
	e := setupPacket(t, gateway.DataPlanePacket, gateway.DataPlaneStream, false)
	refused := func(d gateway.PeerDataPlane) bool { return !d.Active && d.Peer == gateway.DataPlaneStream }
	d := dataPlane(t, e.a, "b", refused, "refusal on a")
	if !strings.Contains(d.Reason, "data-plane stream for peer a") {
		t.Errorf("a's reason %q does not say b is configured for streams", d.Reason)
	}
	db := dataPlane(t, e.b, "a", func(d gateway.PeerDataPlane) bool { return d.Peer == gateway.DataPlanePacket }, "offer seen on b")
	if db.Active || db.Reason == "" {
		t.Errorf("b's status for a: %+v, want inactive with a reason", db)
	}
	e.a.waitMetric(t, "strait_packet_refusals_total{peer=\"b\"}", func(v float64) bool { return v >= 1 }, "refusal counted on a")
	e.b.waitMetric(t, "strait_packet_refusals_total{peer=\"a\"}", func(v float64) bool { return v >= 1 }, "refusal counted on b")
	if !strings.Contains(e.a.proc.out.String(), "packet mode refused") {
		t.Errorf("a's log does not say the packet mode was refused:\n%s", e.a.proc.out.String())
	}
	e.curl(t, "over streams")
	if n := e.a.metric(t, "strait_client_connections_total"); n < 1 {
		t.Errorf("a's stream mode accepted %v connections, want the client's", n)
	}
	if n := e.a.metric(t, packetMetrA); n != 0 {
		t.Errorf("a's program sent %v import packets; the mode was refused", n)
	}
}

// TestPacketModeHealth: with two exporting gateways, new flows spread over
// both, and a's prober has answers from both gateways' programs; when a's
// uplink to one dies, the prober takes it out of a's maps (the detection
// time, from `ip link set down` to the peers map saying dead, is logged: a
// figure, not a threshold) and every new flow goes to the other, which
// serves them all; back up, it takes flows again. Then its programs are
// torn down (--packet-teardown) while its uplink works: taken out again.
// STRAIT_PACKET_FAILOVER_REPS repeats the uplink part for the figures.
func TestPacketModeHealth(t *testing.T) {
	e := setupPacket(t, gateway.DataPlanePacket, gateway.DataPlanePacket, true)
	active := func(d gateway.PeerDataPlane) bool { return d.Active }
	dataPlane(t, e.a, "b", active, "packet mode on a")
	// Each of b's gateways fills its exports map once it heard one of a's
	// offers, which go to random gateways of b.
	exports := func(d gateway.PeerDataPlane) bool { return d.Active && d.Exports }
	dataPlane(t, e.b, "a", exports, "a's offer heard on b1")
	dataPlane(t, e.b2, "a", exports, "a's offer heard on b2")
	e.waitProbed(t)
	// Every gateway of the other cluster answers the prober: the stream
	// mode's probes and keepalives toward it slow down to an eighth of the
	// keepalive timeout (docs/packet.md, "What the gateway processes
	// cost"), on both sides.
	slow := func(v float64) bool { return v == 0.125 }
	e.a.waitMetric(t, `strait_peer_probe_interval_seconds{peer="b"}`, slow, "a's sessions to b probe slowly")
	e.b.waitMetric(t, `strait_peer_probe_interval_seconds{peer="a"}`, slow, "b1's sessions to a probe slowly")
	e.b2.waitMetric(t, `strait_peer_probe_interval_seconds{peer="a"}`, slow, "b2's sessions to a probe slowly")
	rx := func(g *gw) float64 { return g.metric(t, packetMetrB) }
	// New flows (each curl its own source port) spread over both; a
	// flow's gateway is its Maglev bucket's, so 30 flows all on one of two
	// gateways would take a one in 5e8 chance.
	rx1, rx2 := rx(e.b), rx(e.b2)
	for i := range 30 {
		e.curl(t, fmt.Sprintf("flow %d", i))
	}
	if rx(e.b) == rx1 || rx(e.b2) == rx2 {
		t.Fatalf("30 flows did not reach both gateways: b1 %v→%v, b2 %v→%v packets", rx1, rx(e.b), rx2, rx(e.b2))
	}

	reps := 1
	if v := os.Getenv("STRAIT_PACKET_FAILOVER_REPS"); v != "" {
		fmt.Sscan(v, &reps)
	}
	var took []time.Duration
	const late = "strait_packet_probe_late_rounds_total"
	for rep := range reps {
		late0 := e.a.metric(t, late)
		downAt := time.Now()
		testenv.Run(t, "ip", "-n", e.ga, "link", "set", "wan2", "down")
		ran := time.Since(downAt)
		d := e.waitPeerAlive(t, e.b2.addr, false, "b2 taken out of a's maps after its uplink died")
		took = append(took, d.Sub(downAt))
		// A figure for the log, not a threshold. The link goes down while
		// the command runs, so the figure is at most that much too long.
		t.Logf("uplink down %d: b2 taken out of a's maps %v after `ip link set down` began (the command took %v; a's prober ran %v rounds late meanwhile; load %s)", rep+1,
			d.Sub(downAt).Round(100*time.Microsecond), ran.Round(100*time.Microsecond), e.a.metric(t, late)-late0, loadavg())
		rx1, rx2 = rx(e.b), rx(e.b2)
		flows := 30
		if rep > 0 {
			flows = 3
		}
		for i := range flows {
			e.curl(t, fmt.Sprintf("after b2's uplink died, flow %d", i))
		}
		if got := rx(e.b2); got != rx2 {
			t.Errorf("b2 translated %v packets while its uplink was down", got-rx2)
		}
		if rx(e.b) == rx1 {
			t.Errorf("b1 took no flow after b2 went down")
		}
		if rep == 0 {
			// The slow sessions still find the dead gateway: they end
			// within the keepalive timeout (1 s), and the pool takes b2
			// out of the stream mode's table.
			e.a.waitMetric(t, `strait_peer_gateway_up{gateway="192.0.3.2:4443",peer="b"}`, func(v float64) bool { return v == 0 },
				"a's sessions find b2 dead at the slow interval")
		}
		testenv.Run(t, "ip", "-n", e.ga, "link", "set", "wan2", "up")
		// Down took the device's routes, the source-address one included.
		testenv.Run(t, "ip", "-n", e.ga, "route", "replace", "192.0.3.0/24", "dev", "wan2", "src", "192.0.2.1")
		e.waitPeerAlive(t, e.b2.addr, true, "b2 back in a's maps")
	}
	if len(took) > 1 {
		slices.Sort(took)
		q := func(p float64) time.Duration {
			return took[int(p*float64(len(took)-1)+0.5)].Round(100 * time.Microsecond)
		}
		t.Logf("uplink down → taken out of the maps, %d repetitions: median %v, p95 %v, max %v (load %s; a's prober ran %v rounds late); all: %v",
			len(took), q(0.5), q(0.95), took[len(took)-1].Round(100*time.Microsecond), loadavg(), e.a.metric(t, late), took)
	}
	e.a.waitMetric(t, packetUp2, func(v float64) bool { return v == 1 }, "b2 back")
	rx2 = rx(e.b2)
	for i := 0; rx(e.b2) == rx2; i++ {
		if i == 30 {
			t.Fatalf("30 flows after b2 came back, none reached it")
		}
		e.curl(t, fmt.Sprintf("b2 back, flow %d", i))
	}

	// The programs torn down, the uplink up: nothing answers the probes.
	e.b2.proc.kill()
	e.b2.proc = startOwned(t, e.b2.t, e.b2.netns, binary, "gateway", "--config", e.b2.config, "--packet-teardown")
	e.b2.waitLive(t, "a", 0)
	dataPlane(t, e.b2, "a", exports, "b2 restarted with --packet-teardown")
	stopAt := time.Now()
	stop(t, e.b2)
	if !strings.Contains(e.b2.proc.out.String(), "packet mode torn down") {
		t.Fatalf("b2: no teardown in the log:\n%s", e.b2.proc.out.String())
	}
	d := e.waitPeerAlive(t, e.b2.addr, false, "b2 taken out of a's maps after its programs were torn down")
	t.Logf("b2 taken out of a's maps %v after its gateway began its teardown (load %s)", d.Sub(stopAt).Round(100*time.Microsecond), loadavg())
	rx1 = rx(e.b)
	for i := range 10 {
		e.curl(t, fmt.Sprintf("b2 torn down, flow %d", i))
	}
	if rx(e.b) == rx1 {
		t.Errorf("b1 took no flow after b2's programs were torn down")
	}
	if n := e.a.metric(t, packetDowns1); n != 0 {
		t.Logf("b1 was taken out %v times by a's prober while it answered (a false down, on this host's load %s)", n, loadavg())
	}
}

// TestPacketModeWorkloads: two clients of cluster a (two addresses of the
// client node) named by Workloads labelled role blocked and neighbour; an
// AccessPolicy denying role blocked drops the blocked client's new flows
// in the packet mode's programs — at a's egress (a's Workloads in a's
// policy map), then at b's ingress (a's hello offers them to b) — and
// counts them per policy, while the neighbour passes; swapping the labels
// takes effect without a restart (docs/packet.md, "Workloads").
func TestPacketModeWorkloads(t *testing.T) {
	e := setupPacket(t, gateway.DataPlanePacket, gateway.DataPlanePacket, false)
	active := func(d gateway.PeerDataPlane) bool { return d.Active }
	dataPlane(t, e.a, "b", active, "packet mode on a")
	dataPlane(t, e.b, "a", func(d gateway.PeerDataPlane) bool { return d.Active && d.Exports }, "a's offer heard on b")
	const one, two = "10.1.0.2", "10.1.0.3"
	testenv.Run(t, "ip", "-n", e.ca, "addr", "add", two+"/24", "dev", "eth0")
	workloads := func(roleOne, roleTwo string) string {
		w := func(name, addr, role string) string {
			return fmt.Sprintf("apiVersion: strait.dev/v1alpha1\nkind: Workload\nmetadata: {name: %s, namespace: web, labels: {role: %s}}\nspec: {addresses: [%s]}\n---\n", name, role, addr)
		}
		return w("client-one", one, roleOne) + w("client-two", two, roleTwo)
	}
	// try sends one request from src; the deadline bounds a dropped flow.
	try := func(src, body, max string) bool {
		f := writeTemp(t, "body-*", body)
		out, err := exec.Command("ip", "netns", "exec", e.ca, "curl", "-sS", "--fail", "--max-time", max, "-H", "Expect:",
			"--interface", src, "--data-binary", "@"+f, "http://"+packetVIP+":80/").CombinedOutput()
		return err == nil && string(out) == body
	}
	passes := func(src, what string) {
		t.Helper()
		for deadline := time.Now().Add(patience); !try(src, what, curlMax); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no answer from %s after %v", what, src, patience)
			}
		}
	}
	const denied = "strait_packet_policy_drops_total{policy=\"deny-blocked\"}"
	// dropped polls until g's programs drop src's flows by deny-blocked.
	dropped := func(g *gw, src, what string) {
		t.Helper()
		before := g.metric(t, denied)
		for deadline := time.Now().Add(patience); g.metric(t, denied) == before; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no flow from %s denied by deny-blocked on %s after %v", what, src, g.cluster, patience)
			}
			if try(src, "denied", "1") {
				t.Logf("%s: %s answered before the change reached the map", what, src)
			}
		}
	}
	deny := policyYAML("deny-blocked", 10, "deny", "  from: {workloadSelector: {matchLabels: {role: blocked}}}\n  to: {exports: [echo]}\n")

	// Egress: a's own Workloads in a's policy map.
	e.a.apply(t, workloads("blocked", "neighbour"))
	e.a.apply(t, deny)
	dropped(e.a, one, "egress")
	passes(two, "egress, the neighbour")
	if n := e.a.metric(t, "strait_packet_drops_total{reason=\"egress_policy\"}"); n < 1 {
		t.Errorf("egress policy drops on a: %v, want at least 1", n)
	}
	e.a.apply(t, workloads("neighbour", "blocked")) // relabel, no restart
	dropped(e.a, two, "egress after the relabel")
	passes(one, "egress after the relabel, the neighbour")

	// Ingress: b knows a's clients only from a's hello.
	e.a.delete(t, deny)
	passes(two, "the policy gone from a")
	e.b.apply(t, deny)
	dropped(e.b, two, "ingress")
	passes(one, "ingress, the neighbour")
	if n := e.b.metric(t, "strait_packet_drops_total{reason=\"ingress_policy\"}"); n < 1 {
		t.Errorf("ingress policy drops on b: %v, want at least 1", n)
	}
	e.a.apply(t, workloads("blocked", "neighbour"))
	dropped(e.b, one, "ingress after the relabel")
	passes(two, "ingress after the relabel, the neighbour")
	if n := e.a.metric(t, "strait_client_connections_total"); n != 0 {
		t.Errorf("a's stream mode accepted %v connections; the programs should have carried them", n)
	}
	if n := e.a.metric(t, "strait_packet_workloads_unsent{peer=\"b\"}"); n != 0 {
		t.Errorf("a left %v Workload addresses out of its hello, want none", n)
	}
}

// TestPacketModeKillUnderLoad: an iperf3 TCP stream and a probe of 2000
// new connections a second (strait load probe: connect, echo, reset) run
// through the packet mode while the importing and then the exporting
// gateway process is killed -9 and restarted (docs/packet.md,
// "Tests"). The stream carries on (its bytes acknowledged
// keep growing while each process is dead and after it restarted, and its
// socket is the same established one at the end: no reset), the probe
// opens connections while each is dead and loses none of them over the
// whole test, a new connection (curl) is served while each is dead, and
// each restart adopts the pins. No throughput or latency is asserted: on
// a loaded host only progress is; a probe fails only when its connection
// fails or gets no echo within 10 s, which bounds hangs, and the slow
// ones (over the lab's 1 s) are logged.
func TestPacketModeKillUnderLoad(t *testing.T) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("needs iperf3")
	}
	e := setupPacket(t, gateway.DataPlanePacket, gateway.DataPlanePacket, false)
	active := func(d gateway.PeerDataPlane) bool { return d.Active }
	dataPlane(t, e.a, "b", active, "packet mode on a")
	dataPlane(t, e.b, "a", func(d gateway.PeerDataPlane) bool { return d.Active && d.Exports }, "a's offer heard on b")

	// A second service for the stream, added while the gateways run: the
	// next offer carries it to b.
	const streamVIP, streamPort, probePort = "10.96.0.11", "5201", "7000"
	e.a.apply(t, `apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: stream, namespace: default}
spec:
  ips: [`+streamVIP+`]
  ports: [{name: iperf, protocol: TCP, port: `+streamPort+`}, {name: probe, protocol: TCP, port: `+probePort+`}]
  clusters: [{cluster: b}]
`)
	e.b.apply(t, `apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: stream, namespace: default}
spec:
  target: "10.2.0.2:`+streamPort+`"
  ports: [{name: iperf, protocol: TCP, port: `+streamPort+`}, {name: probe, protocol: TCP, port: `+probePort+`, target: "10.2.0.2:`+probePort+`"}]
`)
	startIn(t, e.sb, "iperf3", "-s", "-B", "10.2.0.2", "-p", streamPort)
	probeServer := startIn(t, e.sb, binary, "load", "probe-server", "--listen", "10.2.0.2:"+probePort)
	for deadline := time.Now().Add(patience); !strings.Contains(probeServer.out.String(), "listening"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("probe server did not start: %s", probeServer.out.String())
		}
	}
	// Rate-limited: the stream is there to be carried, not to measure,
	// and must leave the host's two cores to the gateways.
	var client *proc
	var sock string
	for deadline := time.Now().Add(patience); sock == ""; {
		if time.Now().After(deadline) {
			t.Fatalf("iperf3 could not start through %s:%s: %s", streamVIP, streamPort, client.out.String())
		}
		client = startIn(t, e.ca, "iperf3", "-c", streamVIP, "-p", streamPort, "-t", "3600", "-b", "50M", "-i", "0")
		// Until the export reached b's map the connection is refused and
		// iperf3 ends; once running, its data connection is the one that
		// has sent more than the control connection ever does.
		for sock == "" {
			select {
			case <-client.done:
			case <-time.After(100 * time.Millisecond):
				if s, acked := streamSocket(t, e.ca, streamVIP+":"+streamPort); acked > 1<<20 {
					sock = s
				}
				continue
			}
			break
		}
	}
	txA := e.a.metric(t, packetMetrA)
	last := ackedBytes(t, e.ca, sock)
	// progress waits until the stream's socket has more bytes acknowledged
	// than at the last call: the stream carries on.
	progress := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(patience); ; time.Sleep(100 * time.Millisecond) {
			select {
			case <-client.done:
				t.Fatalf("%s: iperf3 ended: %v\n%s", what, client.err, client.out.String())
			default:
			}
			if n := ackedBytes(t, e.ca, sock); n > last {
				last = n
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the stream's acknowledged bytes stayed at %d for %v", what, last, patience)
			}
		}
	}
	progress("before the kills")
	if got := e.a.metric(t, packetMetrA); got <= txA {
		t.Fatalf("the stream did not take a's program: %s %v → %v", packetMetrA, txA, got)
	}

	// The probe starts once one probe has been answered (the port reached
	// b's map with the stream's; this makes sure) and runs until the end.
	probeAddr := streamVIP + ":" + probePort
	for deadline := time.Now().Add(patience); ; time.Sleep(100 * time.Millisecond) {
		out, _ := exec.Command("ip", "netns", "exec", e.ca, binary, "load", "probe", "--addr", probeAddr, "--modes", "new",
			"--rate", "10", "--duration", "100ms", "--timeout", "2s").CombinedOutput()
		if strings.Contains(string(out), " sent 1 lost 0 ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no probe answered through %s after %v: %s", probeAddr, patience, out)
		}
	}
	probes := filepath.Join(tmpDir, "probes.csv")
	prober := startIn(t, e.ca, binary, "load", "probe", "--addr", probeAddr, "--modes", "new", "--rate", "2000",
		"--duration", "1h", "--timeout", "10s", "--csv", probes)
	// probing waits until the client has opened 200 more TCP connections
	// (its namespace's ActiveOpens; a tenth of a second of the probe):
	// the probe runs in the phase that follows, however the host schedules
	// it.
	probing := func(what string) {
		t.Helper()
		start := tcpActiveOpens(t, e.ca)
		for deadline := time.Now().Add(patience); tcpActiveOpens(t, e.ca) < start+200; time.Sleep(20 * time.Millisecond) {
			select {
			case <-prober.done:
				t.Fatalf("%s: strait load probe ended: %v\n%s", what, prober.err, prober.out.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the probe opened fewer than 200 connections in %v", what, patience)
			}
		}
	}
	probing("before the kills")
	var phases []probePhase

	phases = append(phases, probePhase{name: "importing gateway dead", from: time.Now()})
	e.a.proc.kill()
	probing("the importing gateway dead")
	progress("the importing gateway dead")
	e.curl(t, "a new connection while the importing gateway is dead")
	progress("the importing gateway dead, after a new connection")
	phases[len(phases)-1].to = time.Now()
	e.a.start(t)
	e.a.waitLive(t, "b", 1)
	dataPlane(t, e.a, "b", active, "packet mode after a's restart")
	progress("after a's restart")
	if !strings.Contains(e.a.proc.out.String(), "adopted pinned link") {
		t.Errorf("the restarted importing gateway did not adopt the pinned links:\n%s", e.a.proc.out.String())
	}

	phases = append(phases, probePhase{name: "exporting gateway dead", from: time.Now()})
	e.b.proc.kill()
	e.a.waitMetric(t, "strait_peer_sessions_live{peer=\"b\"}", func(v float64) bool { return v == 0 }, "b's sessions gone")
	probing("the exporting gateway dead")
	progress("the exporting gateway dead")
	e.curl(t, "a new connection while the exporting gateway is dead")
	progress("the exporting gateway dead, after a new connection")
	phases[len(phases)-1].to = time.Now()
	e.b.start(t)
	e.b.waitLive(t, "a", 0)
	dataPlane(t, e.b, "a", func(d gateway.PeerDataPlane) bool { return d.Active && d.Exports }, "packet mode after b's restart")
	progress("after b's restart")
	probing("after b's restart")
	if !strings.Contains(e.b.proc.out.String(), "adopted pinned link") {
		t.Errorf("the restarted exporting gateway did not adopt the pinned links:\n%s", e.b.proc.out.String())
	}
	checkProbes(t, prober, probes, phases)
	if got, _ := streamSocket(t, e.ca, streamVIP+":"+streamPort); got != sock {
		t.Errorf("the stream's socket changed from %q to %q: the connection was reset and remade", sock, got)
	}
	select {
	case <-client.done:
		t.Errorf("iperf3 ended: %v\n%s", client.err, client.out.String())
	default:
	}
}

// probePhase is a time span of TestPacketModeKillUnderLoad whose probes are
// counted apart.
type probePhase struct {
	name     string
	from, to time.Time
}

// checkProbes stops the probe (SIGINT: it stops sending, waits for the
// probes under way and writes its CSV) and fails the test if any probe
// failed; it logs the counts, overall and per phase, and the slow ones.
func checkProbes(t *testing.T, prober *proc, csvPath string, phases []probePhase) {
	t.Helper()
	_ = prober.cmd.Process.Signal(os.Interrupt)
	select {
	case <-prober.done:
	case <-time.After(2 * patience):
		t.Fatalf("strait load probe did not stop %v after SIGINT:\n%s", 2*patience, prober.out.String())
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatalf("the probe's CSV: %v (its output: %s)", err, prober.out.String())
	}
	defer f.Close()
	samples, err := load.ReadProbeCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) == 0 {
		t.Fatalf("the probe sent nothing: %s", prober.out.String())
	}
	var failed []load.ProbeSample
	slow, worst := 0, time.Duration(0)
	for _, s := range samples {
		if s.Lost() {
			failed = append(failed, s)
			continue
		}
		rtt := s.Recv.Sub(s.Sent)
		if rtt > time.Second {
			slow++
		}
		worst = max(worst, rtt)
	}
	first, last := samples[0].Sent, samples[len(samples)-1].Sent
	t.Logf("probe: %d new connections over %v, %d failed, %d answered after more than 1s, the slowest in %v (load %s)",
		len(samples), last.Sub(first).Round(time.Millisecond), len(failed), slow, worst.Round(time.Millisecond), loadavg())
	for _, ph := range phases {
		n, lost := 0, 0
		for _, s := range samples {
			if !s.Sent.Before(ph.from) && s.Sent.Before(ph.to) {
				n++
				if s.Lost() {
					lost++
				}
			}
		}
		t.Logf("probe while the %s (%v): %d sent, %d failed", ph.name, ph.to.Sub(ph.from).Round(time.Millisecond), n, lost)
	}
	for i, s := range failed {
		if i == 10 {
			t.Logf("… and %d more", len(failed)-10)
			break
		}
		t.Logf("failed probe %d sent %s on %s: %s", s.Seq, s.Sent.Format("15:04:05.000"), s.Conn, s.Err)
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d probe connections failed", len(failed), len(samples))
	}
}

// tcpActiveOpens is netns's count of TCP connections it began to open
// (ActiveOpens in /proc/net/snmp).
func tcpActiveOpens(t *testing.T, netns string) int64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", netns, "cat", "/proc/net/snmp").CombinedOutput()
	if err != nil {
		t.Fatalf("/proc/net/snmp in %s: %v: %s", netns, err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == "ActiveOpens" && i < len(f) {
				var n int64
				fmt.Sscan(f[i], &n)
				return n
			}
		}
	}
	t.Fatalf("no Tcp ActiveOpens in %s's /proc/net/snmp:\n%s", netns, out)
	return 0
}

// streamSocket is the local address and bytes acknowledged of the
// established connection from netns to dst that has sent the most,
// iperf3's data connection (its control connection goes to the same
// port), or "" when there is none.
func streamSocket(t *testing.T, netns, dst string) (string, int64) {
	t.Helper()
	best, most := "", int64(-1)
	for _, s := range ssInfo(t, netns, dst) {
		if s.acked > most {
			best, most = s.local, s.acked
		}
	}
	return best, most
}

// ackedBytes is the bytes acknowledged on the connection from local in
// netns, 0 when it is gone.
func ackedBytes(t *testing.T, netns, local string) int64 {
	t.Helper()
	for _, s := range ssInfo(t, netns, "") {
		if s.local == local {
			return s.acked
		}
	}
	return 0
}

type ssSocket struct {
	local string
	acked int64
}

// ssInfo lists netns's established TCP connections (to dst, if not "")
// with their bytes acknowledged (`ss -tin`).
func ssInfo(t *testing.T, netns, dst string) []ssSocket {
	t.Helper()
	argv := []string{"netns", "exec", netns, "ss", "-tinH", "state", "established"}
	if dst != "" {
		argv = append(argv, "dst", dst)
	}
	out, err := exec.Command("ip", argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("ss in %s: %v: %s", netns, err, out)
	}
	// Each socket is a line "Recv-Q Send-Q Local Peer" followed by an
	// indented line of its TCP info.
	var socks []ssSocket
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") && len(f) >= 4 {
			socks = append(socks, ssSocket{local: f[2]})
			continue
		}
		if len(socks) == 0 {
			continue
		}
		for _, kv := range f {
			if v, ok := strings.CutPrefix(kv, "bytes_acked:"); ok {
				fmt.Sscan(v, &socks[len(socks)-1].acked)
			}
		}
	}
	return socks
}

// TestPacketModePeerResource: two gateways configured for streams, each
// with a packet section, switch to the packet mode when their Peer
// resources say spec.dataPlane packet (the programs are attached then,
// not at the start), and back to streams when one of them says stream,
// without a restart (docs/packet.md, "The gateway").
func TestPacketModePeerResource(t *testing.T) {
	e := setupPacket(t, gateway.DataPlaneStream, gateway.DataPlaneStream, false)
	peer := func(name, addr, dp string) string {
		return fmt.Sprintf("apiVersion: strait.dev/v1alpha1\nkind: Peer\nmetadata: {name: %s}\nspec: {gateways: [\"%s\"], dataPlane: %s}\n", name, addr, dp)
	}
	const conns = "strait_client_connections_total"
	e.curl(t, "over streams first")
	before := e.a.metric(t, conns)
	if before < 1 {
		t.Fatalf("a's stream mode accepted %v connections, want the client's", before)
	}
	if strings.Contains(e.a.proc.out.String(), "packet mode attached") {
		t.Fatalf("a attached the programs with no peer asking for the packet mode:\n%s", e.a.proc.out.String())
	}

	e.a.apply(t, peer("b", "192.0.2.2:4443", "packet"))
	e.b.apply(t, peer("a", "192.0.2.1:4443", "packet"))
	d := dataPlane(t, e.a, "b", func(d gateway.PeerDataPlane) bool { return d.Active && d.Imports }, "packet mode on a by its Peer resource")
	if d.Configured != gateway.DataPlanePacket {
		t.Errorf("a's status says configured %q for b, want packet (the Peer resource's)", d.Configured)
	}
	dataPlane(t, e.b, "a", func(d gateway.PeerDataPlane) bool { return d.Active && d.Exports }, "packet mode on b by its Peer resource")
	tx := e.a.metric(t, packetMetrA)
	e.curl(t, "over the packet mode")
	if got := e.a.metric(t, packetMetrA); got <= tx {
		t.Errorf("a's program sent no import packets into the tunnel: %s %v → %v", packetMetrA, tx, got)
	}
	if got := e.a.metric(t, conns); got != before {
		t.Errorf("a's stream mode accepted %v connections more; the programs should have carried the client", got-before)
	}
	// The mode came from a resource, not from the configuration, and a has
	// no health: responder: cut off from b, its programs still refuse its
	// cluster's probes (docs/failover.md, "A gateway cut off from its
	// peers").
	e.a.waitMetric(t, packetAnswers1, func(v float64) bool { return v > 0 }, "b's programs answer a's probes")
	e.healthProbeAt(t, "10.1.0.1", packet.DefaultProbePort, "ok")
	testenv.Run(t, "ip", "-n", e.ga, "link", "set", "wan", "down")
	e.healthProbeAt(t, "10.1.0.1", packet.DefaultProbePort, "refused")
	testenv.Run(t, "ip", "-n", e.ga, "link", "set", "wan", "up")
	e.healthProbeAt(t, "10.1.0.1", packet.DefaultProbePort, "ok")

	e.a.apply(t, peer("b", "192.0.2.2:4443", "stream"))
	dataPlane(t, e.a, "b", func(d gateway.PeerDataPlane) bool { return !d.Active && d.Configured == gateway.DataPlaneStream },
		"a back to streams by its Peer resource")
	e.curl(t, "over streams again")
	if got := e.a.metric(t, conns); got <= before {
		t.Errorf("a's stream mode accepted no connection after the Peer resource said stream")
	}
}

// TestPacketModeStartErrors: a gateway configured for the packet mode on a
// node that cannot run it does not start, and says why (docs/packet.md,
// "Commands": each requirement is named in the error when missing): a pin
// root on no bpffs names bpffs and the path, a LAN device the node lacks
// names the device. Nothing falls back to streams.
func TestPacketModeStartErrors(t *testing.T) {
	e, id := startPacketTest(t, "pktst")
	ns := testenv.Netns(t, id)
	for _, args := range [][]string{
		{"-n", ns, "link", "add", "lan", "type", "veth", "peer", "name", "lanp"},
		{"-n", ns, "addr", "add", "10.1.0.1/24", "dev", "lan"},
		{"-n", ns, "link", "set", "lan", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	} {
		testenv.Run(t, "ip", args...)
	}
	fabric := filepath.Join(tmpDir, "fabric")
	issueFabric(t, fabric)
	resFile := filepath.Join(tmpDir, "resources.yaml")
	if err := os.WriteFile(resFile, []byte(peerYAML("b", "192.0.2.2:4443")), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(tmpDir, "plain")
	for _, c := range []struct{ name, pinRoot, lan, want string }{
		{"no bpffs", plain, "lan", "pinRoot " + plain + " is not on a bpffs mount"},
		{"no device", e.pins, "nosuchlan0", `lan "nosuchlan0"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := filepath.Join(tmpDir, "gateway.yaml")
			if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`cluster: a
identity: {dir: %s}
listen: 10.1.0.1:4443
admin: %s
state: %s
resources: [%s]
peers: {b: {data-plane: packet}}
packet: {lan: %s, snat: 10.1.0.254, pin-root: %s, name: gw-a}
`, fabric, filepath.Join(tmpDir, "a.sock"), filepath.Join(tmpDir, "state.json"), resFile, c.lan, c.pinRoot)), 0o644); err != nil {
				t.Fatal(err)
			}
			// The gateway is expected to exit; the timeout only bounds a
			// gateway that starts anyway, which is the failure.
			cmd := exec.Command("timeout", patience.String(), "ip", "netns", "exec", ns, binary, "gateway", "--config", cfg)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "packet mode: ") || !strings.Contains(string(out), c.want) {
				t.Fatalf("gateway start: %v, want it to fail naming %q:\n%s", err, c.want, out)
			}
			if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 124 {
				t.Fatalf("the gateway started and ran for %v:\n%s", patience, out)
			}
			if out := testenv.Run(t, "ip", "-n", ns, "-br", "link"); strings.Contains(out, "stv-") {
				t.Errorf("a tunnel device was made anyway:\n%s", out)
			}
		})
	}
}

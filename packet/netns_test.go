package packet

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/ring"
)

// udpTool is a UDP client and server for the namespace test, run with
// python3 (a real socket, as a user's program would use):
//
//	echo ADDR PORT                   echo every datagram back
//	ask ADDR PORT SIZE               send SIZE bytes on a connected socket,
//	                                 print "ok" if they come back, "refused"
//	                                 on ICMP port unreachable
//	vxlan SRC DST INNER              send one VXLAN datagram from SRC to
//	                                 DST:4789 with INNER (hex) as its frame
const udpTool = `
import socket, sys, os
cmd = sys.argv[1]
if cmd == "echo":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[2], int(sys.argv[3])))
    print("listening", flush=True)
    while True:
        data, peer = s.recvfrom(65535)
        s.sendto(data, peer)
elif cmd == "ask":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.connect((sys.argv[2], int(sys.argv[3])))
    data = os.urandom(int(sys.argv[4]))
    try:
        s.send(data)
        got = s.recv(65535)
        print("ok" if got == data else "mismatch %d" % len(got))
    except ConnectionRefusedError:
        print("refused")
    except socket.timeout:
        print("timeout")
elif cmd == "vxlan":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[2], 0))
    hdr = bytes([0x08, 0, 0, 0, 0, 0, 1, 0])
    s.sendto(hdr + bytes.fromhex(sys.argv[4]), (sys.argv[3], 4789))
`

// TestNamespaces builds two clusters as network namespaces — client node,
// gateway node | gateway node, server node — attaches the programs on the
// gateway nodes with `strait packet attach` (which exits: the pinned links
// keep forwarding), fills their maps from this process through the pins,
// and checks with real clients: a 1 MB HTTP echo over TCP (full-size
// segments, MSS clamped), UDP datagrams up to a full 1500-byte packet, ICMP
// port unreachable translated back to the client's socket, packets from a
// non-peer and malformed tunnel packets dropped and counted, re-attaching
// (a restarted process) adopting the pinned state without breaking flows,
// and teardown leaving no pin behind.
func TestNamespaces(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 for the UDP client")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	bin := testenv.StraitBinary(t)
	pins := testenv.BPFFS(t)
	id := testenv.UniqueName("ebpf")
	ca := testenv.Netns(t, id+"-ca")
	ga := testenv.Netns(t, id+"-ga")
	gb := testenv.Netns(t, id+"-gb")
	sb := testenv.Netns(t, id+"-sb")
	ip := func(args ...string) { testenv.Run(t, "ip", args...) }
	ip("-n", ga, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", ca)
	ip("-n", ga, "link", "add", "wan", "type", "veth", "peer", "name", "wan", "netns", gb)
	ip("-n", gb, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", sb)
	for _, a := range []struct{ ns, dev, addr string }{
		{ca, "eth0", "10.1.0.2/24"}, {ga, "lan", "10.1.0.1/24"},
		{ga, "wan", "192.0.2.1/24"}, {gb, "wan", "192.0.2.2/24"},
		{gb, "lan", "10.2.0.1/24"}, {gb, "lan", "10.2.0.254/24"}, // the second: gb's SNAT address
		{sb, "eth0", "10.2.0.2/24"},
		{gb, "wan", "192.0.2.99/24"}, // a source that is no peer
	} {
		ip("-n", a.ns, "addr", "add", a.addr, "dev", a.dev)
		ip("-n", a.ns, "link", "set", a.dev, "up")
	}
	// The client routes everything through its gateway node; the server
	// needs no route at all: SNAT makes every client look on-link.
	ip("-n", ca, "route", "add", "default", "via", "10.1.0.1")

	nsRun := func(ns string, args ...string) string {
		t.Helper()
		return testenv.Run(t, "ip", append([]string{"netns", "exec", ns}, args...)...)
	}
	attach := func() {
		nsRun(ga, bin, "packet", "attach", "--name", id+"-ga", "--pin-root", pins, "--lan", "lan")
		nsRun(gb, bin, "packet", "attach", "--name", id+"-gb", "--pin-root", pins, "--lan", "lan", "--snat", "10.2.0.254")
	}
	attach()
	t.Cleanup(func() {
		// Best effort when the test failed before its own teardown.
		for _, g := range []string{ga, gb} {
			_ = exec.Command("ip", "netns", "exec", g, bin, "packet", "teardown", "--name", g, "--pin-root", pins).Run()
		}
	})

	da := loadTest(t, Config{Name: id + "-ga", PinRoot: pins})
	db := loadTest(t, Config{Name: id + "-gb", PinRoot: pins})
	vip := netip.MustParseAddr("10.96.0.10")
	web := Service{vip, 80, TCP}
	dns := Service{vip, 5353, UDP}
	closed := Service{vip, 5354, UDP}
	must(t, da.SetImports(map[Service]Import{web: {ID: 1}, dns: {ID: 2}, closed: {ID: 3}}))
	table, err := ring.New([]string{"gb"}, ring.Options{})
	must(t, err)
	must(t, da.SetTable(0, table, map[string]netip.Addr{"gb": netip.MustParseAddr("192.0.2.2")}))
	must(t, da.SetPeers(map[netip.Addr]Peer{netip.MustParseAddr("192.0.2.2"): {Cluster: 1, Alive: true}}))
	must(t, db.SetExports(map[Service]Export{
		web:    {Target: netip.MustParseAddrPort("10.2.0.2:8080"), ID: 1},
		dns:    {Target: netip.MustParseAddrPort("10.2.0.2:5353"), ID: 2},
		closed: {Target: netip.MustParseAddrPort("10.2.0.2:5354"), ID: 3},
	}))
	must(t, db.SetPeers(map[netip.Addr]Peer{netip.MustParseAddr("192.0.2.1"): {Cluster: 1, Alive: true}}))
	any := netip.MustParsePrefix("0.0.0.0/0")
	egress, ingress := map[PolicyKey]Verdict{}, map[PolicyKey]Verdict{}
	for svc := uint32(1); svc <= 3; svc++ {
		egress[PolicyKey{Cluster: 0, Service: svc, Prefix: any}] = Verdict{Allow: true, Rule: 1}
		ingress[PolicyKey{Cluster: 1, Service: svc, Prefix: any}] = Verdict{Allow: true, Rule: 1}
	}
	must(t, da.SetPolicy(egress))
	must(t, db.SetPolicy(ingress))

	testenv.Start(t, "ip", "netns", "exec", sb, bin, "app", "echo", "--listen", "10.2.0.2:8080")
	testenv.Start(t, "ip", "netns", "exec", sb, "python3", "-c", udpTool, "echo", "10.2.0.2", "5353")

	// TCP: a 1 MB body each way through curl, the first try waiting for
	// the server to listen.
	body := make([]byte, 1<<20)
	_, _ = rand.Read(body)
	bodyFile := filepath.Join(t.TempDir(), "body")
	must(t, os.WriteFile(bodyFile, body, 0o600))
	curl := func() ([]byte, error) {
		return exec.Command("ip", "netns", "exec", ca, "curl", "-sS", "--max-time", "10",
			"--data-binary", "@"+bodyFile, "http://10.96.0.10:80/").Output()
	}
	deadline := time.Now().Add(30 * time.Second)
	var got []byte
	for {
		got, err = curl()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("curl through the packet path: %v, %d bytes back of %d\nga: %v\ngb: %v", err, len(got), len(body), counters(t, da), counters(t, db))
	}

	// UDP: small and full-size datagrams (1472 + 28 = a 1500-byte packet,
	// 1550 inside VXLAN: the underlay fragments and reassembles it).
	for _, size := range []string{"32", "1400", "1472"} {
		if out := strings.TrimSpace(nsRun(ca, "python3", "-c", udpTool, "ask", "10.96.0.10", "5353", size)); out != "ok" {
			t.Errorf("UDP %s bytes: %s\nga: %v\ngb: %v", size, out, counters(t, da), counters(t, db))
		}
	}
	// ICMP: nothing listens on the target of port 5354; the server's port
	// unreachable reaches the client's connected socket as ECONNREFUSED.
	if out := strings.TrimSpace(nsRun(ca, "python3", "-c", udpTool, "ask", "10.96.0.10", "5354", "10")); out != "refused" {
		t.Errorf("UDP to a closed target port: %s, want refused\ngb: %v", out, counters(t, db))
	}

	ca1, cb1 := counters(t, da), counters(t, db)
	for _, c := range []struct {
		m    map[string]uint64
		name string
	}{
		{ca1, "import_tx_packets"}, {ca1, "import_flows"}, {ca1, "reply_rx_packets"}, {ca1, "mss_clamped"},
		{cb1, "export_rx_packets"}, {cb1, "export_flows"}, {cb1, "reply_tx_packets"}, {cb1, "icmp_error_tx_packets"},
		{cb1, "mss_clamped"},
	} {
		if c.m[c.name] == 0 {
			t.Errorf("counter %s is 0", c.name)
		}
	}

	// Tunnel packets from an address that is no peer, and malformed ones
	// from the peer, are dropped and counted.
	inner := "ffffffffffff" + "020000000001" + "0800" +
		"450000280000400040060000" + "0a010002" + "0a60000a" + "9c400050" + "0000000000000000" + "50020000" + "00000000"
	nsRun(gb, "python3", "-c", udpTool, "vxlan", "192.0.2.99", "192.0.2.1", inner)
	// The kernel's VXLAN receive path drops frames too short to hold an
	// IPv4 header; one with a cut-short TCP header reaches the program.
	nsRun(gb, "python3", "-c", udpTool, "vxlan", "192.0.2.2", "192.0.2.1", inner[:(14+24)*2])
	waitCounter(t, da, "non_peer_drops", ca1["non_peer_drops"]+1)
	waitCounter(t, da, "malformed_drops", ca1["malformed_drops"]+1)

	// A restarted gateway process attaches again: it adopts the pinned
	// maps and links (flows stay pinned) and forwarding goes on.
	flowsBefore, err := da.Flows()
	must(t, err)
	attach()
	flowsAfter, err := da.Flows()
	must(t, err)
	for f, gw := range flowsBefore {
		if flowsAfter[f] != gw {
			t.Errorf("flow %v lost its pin across re-attach", f)
		}
	}
	if got, err := curl(); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("curl after re-attach: %v", err)
	}

	// Teardown removes every pin; nothing forwards any more.
	nsRun(ga, bin, "packet", "teardown", "--name", id+"-ga", "--pin-root", pins)
	nsRun(gb, bin, "packet", "teardown", "--name", id+"-gb", "--pin-root", pins)
	for _, g := range []string{ga, gb} {
		if left, err := os.ReadDir(filepath.Join(pins, g)); !os.IsNotExist(err) {
			t.Errorf("pins of %s left after teardown: %v %v", g, left, err)
		}
	}
	for _, ns := range []string{ga, gb} {
		if out := nsRun(ns, "ip", "-o", "link", "show", "type", "vxlan"); strings.TrimSpace(out) != "" {
			t.Errorf("VXLAN device left in %s: %s", ns, out)
		}
	}
	if _, err := exec.Command("ip", "netns", "exec", ca, "curl", "-sS", "--max-time", "2", "http://10.96.0.10:80/").Output(); err == nil {
		t.Error("the clusterset IP still answers after teardown")
	}
}

func counters(t *testing.T, d *Datapath) map[string]uint64 {
	t.Helper()
	c, err := d.Counters()
	must(t, err)
	for k, v := range c {
		if v == 0 {
			delete(c, k)
		}
	}
	return c
}

// waitCounter waits until counter name reaches want: the kernel delivers
// the datagram after the sender returns.
func waitCounter(t *testing.T, d *Datapath, name string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := d.Counters()
		must(t, err)
		if c[name] >= want {
			return
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(c)
			t.Errorf("counter %s is %d, want ≥ %d: %s", name, c[name], want, b)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

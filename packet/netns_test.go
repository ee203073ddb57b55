package packet

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
)

// udpTool is a UDP client and server for the namespace test, run with
// python3 (a real socket, as a user's program would use):
//
//	echo ADDR PORT                   echo every datagram back
//	ask ADDR PORT SIZE               send SIZE bytes on a connected socket,
//	                                 print "ok" if they come back, "refused"
//	                                 on ICMP port unreachable, "error N" on
//	                                 another error (EMSGSIZE: the path MTU
//	                                 went down)
//	vxlan SRC DST INNER              send one VXLAN datagram from SRC to
//	                                 DST:4789 with INNER (hex) as its frame
//	frags DST PORT SIZE ID SRCS [late]
//	                                 from each of SRCS (comma-separated
//	                                 local addresses) send one datagram of
//	                                 SIZE bytes to DST:PORT in fragments of
//	                                 IPv4 ID ID, built here and sent on a
//	                                 raw socket, the sources' fragments
//	                                 interleaved (with late, each second
//	                                 fragment before its first); print per
//	                                 source "ok" if it comes back, else
//	                                 "timeout" or "mismatch"
const udpTool = `
import socket, sys, os, struct, time
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
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
    except OSError as e:
        print("error %d" % e.errno)
elif cmd == "burst":
    # count datagrams of size with DF set whatever the path MTU says
    # (IP_MTU_DISCOVER = IP_PMTUDISC_PROBE), back to back; unconnected,
    # so that the ICMP errors they meet fail no send.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, 10, 3)
    dst = (sys.argv[2], int(sys.argv[3]))
    data = os.urandom(int(sys.argv[4]))
    n = 0
    for _ in range(int(sys.argv[5])):
        try:
            s.sendto(data, dst)
            n += 1
        except OSError:
            pass
    print(n)
elif cmd == "frags":
    dst, port, size, ident = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    late = len(sys.argv) > 7 and sys.argv[7] == "late"
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    socks, datas, frags = [], [], []
    for src in sys.argv[6].split(","):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((src, 0))
        s.settimeout(2)
        data = os.urandom(size)
        sport = s.getsockname()[1]
        pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 17, 8 + size)
        hdr = struct.pack("!HHHH", sport, port, 8 + size, 0)
        c = csum(pseudo + hdr + data) or 0xffff
        dgram = struct.pack("!HHHH", sport, port, 8 + size, c) + data
        mine = []
        for off in range(0, len(dgram), 1480):
            part = dgram[off:off + 1480]
            fo = off // 8 | (0x2000 if off + 1480 < len(dgram) else 0)
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(part), ident, fo, 64, 17, 0,
                             socket.inet_aton(src), socket.inet_aton(dst))
            ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
            mine.append(ip + part)
        if late:
            mine[0], mine[1] = mine[1], mine[0]
        socks.append(s)
        datas.append(data)
        frags.append(mine)
    for i in range(max(len(f) for f in frags)):
        for f in frags:
            if i < len(f):
                raw.sendto(f[i], (dst, 0))
    out = []
    for s, data in zip(socks, datas):
        try:
            got = s.recv(65535)
            out.append("ok" if got == data else "mismatch")
        except socket.timeout:
            out.append("timeout")
    print(" ".join(out))
elif cmd == "vxlan":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((sys.argv[2], 0))
    hdr = bytes([0x08, 0, 0, 0, 0, 0, 1, 0])
    s.sendto(hdr + bytes.fromhex(sys.argv[4]), (sys.argv[3], 4789))
`

// clusters is two clusters as network namespaces — a client node and a
// gateway node in cluster a, a gateway node and a server node in cluster
// b — connected through one of the paths compared here:
//
//	packet: the programs attached on the gateway nodes with `strait packet
//	        attach` (which exits: the pinned links keep forwarding), their
//	        maps filled from this process through the pins; clients use
//	        the clusterset IP 10.96.0.10
//	vxlan:  a kernel VXLAN device on each gateway node pointing at the
//	        other (the lab's vxlan peer), routes through it
//	direct: plain routing over the WAN link
//	nft:    the vxlan path, with gb translating as the packet path does
//	        but with nftables: clients use 10.96.0.10, which gb DNATs to
//	        the server and SNATs to its SNAT address 10.2.0.254
type clusters struct {
	id, ca, ga, gb, sb string
	bin, pins          string
	da, db             *Datapath // packet mode only
	target             string    // the address clients use for the server
}

func newClusters(t testing.TB, mode string) *clusters {
	testenv.RequireRoot(t)
	c := &clusters{bin: testenv.StraitBinary(t), id: testenv.UniqueName("ebpf")}
	c.ca = testenv.Netns(t, c.id+"-ca")
	c.ga = testenv.Netns(t, c.id+"-ga")
	c.gb = testenv.Netns(t, c.id+"-gb")
	c.sb = testenv.Netns(t, c.id+"-sb")
	ca, ga, gb, sb := c.ca, c.ga, c.gb, c.sb
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
	// The client routes everything through its gateway node.
	ip("-n", ca, "route", "add", "default", "via", "10.1.0.1")
	c.target = "10.2.0.2"
	switch mode {
	case "direct", "vxlan", "nft":
		for _, ns := range []string{ga, gb} {
			testenv.Run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
		}
		if mode != "nft" { // there, the server sees only gb's SNAT address
			ip("-n", sb, "route", "add", "10.1.0.0/24", "via", "10.2.0.1")
		}
		if mode == "direct" {
			ip("-n", ga, "route", "add", "10.2.0.0/24", "via", "192.0.2.2")
			ip("-n", gb, "route", "add", "10.1.0.0/24", "via", "192.0.2.1")
			return c
		}
		for _, e := range []struct{ ns, local, remote, overlay, peer, behind string }{
			{ga, "192.0.2.1", "192.0.2.2", "240.0.0.1/30", "240.0.0.2", "10.2.0.0/24"},
			{gb, "192.0.2.2", "192.0.2.1", "240.0.0.2/30", "240.0.0.1", "10.1.0.0/24"},
		} {
			ip("-n", e.ns, "link", "add", "vx", "mtu", "1450", "type", "vxlan", "id", "100",
				"local", e.local, "remote", e.remote, "dstport", "4789")
			ip("-n", e.ns, "addr", "add", e.overlay, "dev", "vx")
			ip("-n", e.ns, "link", "set", "vx", "up")
			ip("-n", e.ns, "route", "add", e.behind, "via", e.peer, "dev", "vx")
		}
		if mode == "nft" {
			c.target = "10.96.0.10"
			ip("-n", ga, "route", "add", "10.96.0.10/32", "via", "240.0.0.2", "dev", "vx")
			rules := filepath.Join(t.TempDir(), "nat.nft")
			must(t, os.WriteFile(rules, []byte(nftNAT), 0o600))
			testenv.Run(t, "ip", "netns", "exec", gb, "nft", "-f", rules)
		}
		return c
	case "packet":
	default:
		t.Fatalf("mode %q", mode)
	}
	c.target = "10.96.0.10"
	c.pins = testenv.BPFFS(t)
	c.attach(t)
	t.Cleanup(func() {
		// Best effort when the test failed before its own teardown.
		for _, g := range []string{ga, gb} {
			_ = exec.Command("ip", "netns", "exec", g, c.bin, "packet", "teardown", "--name", g, "--pin-root", c.pins).Run()
		}
	})

	// The maps' contents go in as a gateway's operator would put them,
	// through `strait packet apply`; this process then adopts the pins to
	// read counters and flows.
	services := `
  - {address: 10.96.0.10, port: 80, protocol: TCP, id: 1, CLUSTER_OR_TARGET8080}
  - {address: 10.96.0.10, port: 5353, protocol: UDP, id: 2, CLUSTER_OR_TARGET5353}
  - {address: 10.96.0.10, port: 5354, protocol: UDP, id: 3, CLUSTER_OR_TARGET5354}
  - {address: 10.96.0.10, port: 5201, protocol: TCP, id: 4, CLUSTER_OR_TARGET5201}
  - {address: 10.96.0.10, port: 5201, protocol: UDP, id: 5, CLUSTER_OR_TARGET5201}
`
	importing := "clusters: [{name: b, gateways: {gb: 192.0.2.2}}]\nimports:" +
		regexp.MustCompile(`CLUSTER_OR_TARGET\d+`).ReplaceAllString(services, "cluster: b") +
		"peers: [{address: 192.0.2.2, cluster: 1}]\npolicy:\n"
	exporting := "exports:" + regexp.MustCompile(`CLUSTER_OR_TARGET(\d+)`).ReplaceAllString(services, "target: 10.2.0.2:$1") +
		"peers: [{address: 192.0.2.1, cluster: 1}]\npolicy:\n"
	for id := 1; id <= 5; id++ {
		importing += fmt.Sprintf("  - {cluster: 0, service: %d, prefix: 0.0.0.0/0}\n", id)
		exporting += fmt.Sprintf("  - {cluster: 1, service: %d, prefix: 0.0.0.0/0}\n", id)
	}
	dir := t.TempDir()
	for _, g := range []struct{ ns, state string }{{ga, importing}, {gb, exporting}} {
		file := filepath.Join(dir, g.ns+".yaml")
		must(t, os.WriteFile(file, []byte(g.state), 0o600))
		testenv.Run(t, "ip", "netns", "exec", g.ns, c.bin, "packet", "apply", "--name", g.ns, "--pin-root", c.pins, "-f", file)
	}
	c.da = loadTest(t, Config{Name: ga, PinRoot: c.pins})
	c.db = loadTest(t, Config{Name: gb, PinRoot: c.pins})
	return c
}

// nftNAT is the packet path's export translation in nftables: DNAT from the
// clusterset IP to the target, SNAT to the gateway's SNAT address.
const nftNAT = `table ip strait_bench {
	chain pre {
		type nat hook prerouting priority dstnat;
		ip daddr 10.96.0.10 dnat to 10.2.0.2
	}
	chain post {
		type nat hook postrouting priority srcnat;
		ct status dnat oifname "lan" snat to 10.2.0.254
	}
}
`

// attach runs `strait packet attach` on both gateway nodes, as a starting
// gateway process would.
func (c *clusters) attach(t testing.TB) {
	t.Helper()
	testenv.Run(t, "ip", "netns", "exec", c.ga, c.bin, "packet", "attach", "--name", c.ga, "--pin-root", c.pins, "--lan", "lan")
	testenv.Run(t, "ip", "netns", "exec", c.gb, c.bin, "packet", "attach", "--name", c.gb, "--pin-root", c.pins, "--lan", "lan", "--snat", "10.2.0.254")
}

// TestNamespaces checks the packet path with real clients: a 1 MB HTTP
// echo over TCP (full-size segments, MSS clamped), UDP datagrams up to a
// full 1500-byte packet, ICMP port unreachable translated back to the
// client's socket, packets from a non-peer and malformed tunnel packets
// dropped and counted, re-attaching (a restarted process) adopting the
// pinned state without breaking flows, and teardown leaving no pin behind.
func TestNamespaces(t *testing.T) {
	testenv.RequireRoot(t)
	for _, cmd := range []string{"python3", "curl"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Skipf("needs %s", cmd)
		}
	}
	c := newClusters(t, "packet")
	ca, ga, gb, sb, bin, pins, da, db := c.ca, c.ga, c.gb, c.sb, c.bin, c.pins, c.da, c.db
	nsRun := func(ns string, args ...string) string {
		t.Helper()
		return testenv.Run(t, "ip", append([]string{"netns", "exec", ns}, args...)...)
	}
	// ask sends one datagram of size bytes to the clusterset IP's port and
	// says what came back, retrying until it is want or 20 s have passed:
	// a loaded host may start the UDP server late or lose a datagram.
	ask := func(ns, port, size, want string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			out := strings.TrimSpace(nsRun(ns, "python3", "-c", udpTool, "ask", "10.96.0.10", port, size))
			if out == want || time.Now().After(deadline) {
				return out
			}
		}
	}
	var err error

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
		if out := ask(ca, "5353", size, "ok"); out != "ok" {
			t.Errorf("UDP %s bytes: %s\nga: %v\ngb: %v", size, out, counters(t, da), counters(t, db))
		}
	}
	// ICMP: nothing listens on the target of port 5354; the server's port
	// unreachable reaches the client's connected socket as ECONNREFUSED.
	if out := ask(ca, "5354", "10", "refused"); out != "refused" {
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

	// Translated packets went by the programs' own routes (the ones cached
	// in flow and NAT entries), none by the kernel's forwarding.
	for _, m := range []map[string]uint64{ca1, cb1} {
		if m["fib_pass"] != 0 {
			t.Errorf("fib_pass = %d, want 0", m["fib_pass"])
		}
	}

	// Every pinned flow holds the route its replies are delivered by: the
	// LAN device and, the client being on its subnet, the client itself
	// as the next hop (struct flow_val).
	lanIf := nsRun(ga, "cat", "/sys/class/net/lan/ifindex")
	var fk, fv []byte
	it := da.coll.Maps["flows"].Iterate()
	n := 0
	for it.Next(&fk, &fv) {
		n++
		ifindex, nh := binary.NativeEndian.Uint32(fv[4:]), netip.AddrFrom4([4]byte(fv[8:12]))
		if fmt.Sprint(ifindex) != strings.TrimSpace(lanIf) || nh != netip.MustParseAddr("10.1.0.2") {
			t.Errorf("flow %x: route ifindex %d next hop %v, want %s and 10.1.0.2", fk, ifindex, nh, strings.TrimSpace(lanIf))
		}
	}
	must(t, it.Err())
	if n == 0 {
		t.Error("no pinned flow after the traffic")
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
	// A whole packet from the peer for a service this gateway neither
	// exports nor imports (10.1.0.2:40000 → 10.96.0.10:80 arriving at the
	// importing side) is dropped and counted too.
	nsRun(gb, "python3", "-c", udpTool, "vxlan", "192.0.2.2", "192.0.2.1", inner)
	waitCounter(t, da, "unknown_service_drops", ca1["unknown_service_drops"]+1)
	// Datagrams the client itself fragments (over 1472 bytes on a
	// 1500-byte link) and the server's replies to them, fragmented by the
	// server: every fragment crosses all four paths (import, export,
	// reply, delivery), and the echo proves the server got the whole
	// datagram.
	for _, size := range []string{"3000", "8000"} {
		if out := ask(ca, "5353", size, "ok"); out != "ok" {
			t.Errorf("UDP of %s bytes, fragmented by the client: %s\nga: %v\ngb: %v", size, out, counters(t, da), counters(t, db))
		}
	}
	for _, d := range []*Datapath{da, db} {
		waitCounter(t, d, "fragmented_datagrams", 2)
		waitCounter(t, d, "fragments_followed", 2)
	}
	// Two clients whose datagrams carry the same IPv4 ID, their fragments
	// interleaved: behind the SNAT address both have the same source, and
	// only the exporting gateway's own IDs keep the server from mixing
	// them (Linux drops the second one's fragments as duplicates of the
	// first's, or both datagrams where fragments overlap).
	nsRun(ca, "ip", "addr", "add", "10.1.0.3/24", "dev", "eth0")
	for id, deadline := 7000, time.Now().Add(20*time.Second); ; id++ {
		out := strings.TrimSpace(nsRun(ca, "python3", "-c", udpTool, "frags", "10.96.0.10", "5353", "3000", fmt.Sprint(id), "10.1.0.2,10.1.0.3"))
		if out == "ok ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("two clients' fragmented datagrams with one IPv4 ID: %s, want ok ok\nga: %v\ngb: %v", out, counters(t, da), counters(t, db))
			break
		}
	}
	// A later fragment that comes before its first is not translated (no
	// port to place it by): counted and left to the kernel, which has no
	// route for it; the datagram is lost.
	fr := counters(t, da)["fragments"]
	if out := strings.TrimSpace(nsRun(ca, "python3", "-c", udpTool, "frags", "10.96.0.10", "5353", "3000", "9000", "10.1.0.2", "late")); out != "timeout" {
		t.Errorf("a datagram whose second fragment came first: %s, want timeout", out)
	}
	waitCounter(t, da, "fragments", fr+1)

	// A restarted gateway process attaches again: it adopts the pinned
	// maps and links (flows stay pinned) and forwarding goes on — here
	// twice while an iperf3 stream runs, which must finish unbroken.
	var iperf *exec.Cmd
	if _, err := exec.LookPath("iperf3"); err == nil {
		testenv.Start(t, "ip", "netns", "exec", sb, "iperf3", "-s", "-B", "10.2.0.2")
		deadline := time.Now().Add(20 * time.Second)
		for exec.Command("ip", "netns", "exec", ca, "iperf3", "-c", "10.96.0.10", "-t", "1").Run() != nil {
			if time.Now().After(deadline) {
				t.Fatal("iperf3 server unreachable through the packet path")
			}
			time.Sleep(200 * time.Millisecond)
		}
		iperf = exec.Command("ip", "netns", "exec", ca, "iperf3", "-c", "10.96.0.10", "-t", "4", "-J")
		must(t, iperf.Start())
		time.Sleep(time.Second)
	}
	flowsBefore, err := da.Flows()
	must(t, err)
	c.attach(t)
	c.attach(t)
	if iperf != nil {
		if err := iperf.Wait(); err != nil {
			t.Errorf("iperf3 across re-attach: %v", err)
		}
	}
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
	nsRun(ga, bin, "packet", "teardown", "--name", ga, "--pin-root", pins)
	nsRun(gb, bin, "packet", "teardown", "--name", gb, "--pin-root", pins)
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

// TestNamespacesExportChange: tun_ingress keeps its exports lookups per
// CPU, valid for the maps' epoch, which SetExports advances. An export
// taken out stops taking the packets of its established flows from the
// next packet on (they are dropped as for no service), and put back in, it
// takes the next packet again, though the CPU that carried the flow had
// the entry, or its absence, in its copy (one sender's flow mostly stays
// on one CPU: the epoch is shared, so every CPU's copy goes stale at
// once). Bursts of datagrams, counted by the programs' counters.
func TestNamespacesExportChange(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3")
	}
	c := newClusters(t, "packet")
	testenv.Start(t, "ip", "netns", "exec", c.sb, "python3", "-c", udpTool, "echo", "10.2.0.2", "5353")
	for deadline := time.Now().Add(20 * time.Second); ; {
		out := strings.TrimSpace(testenv.Run(t, "ip", "netns", "exec", c.ca, "python3", "-c", udpTool, "ask", "10.96.0.10", "5353", "100"))
		if out == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("UDP through the packet path: %s", out)
		}
	}
	dns := Service{Addr: netip.MustParseAddr("10.96.0.10"), Port: 5353, Proto: UDP}
	all := map[Service]Export{dns: {Target: netip.MustParseAddrPort("10.2.0.2:5353"), ID: 2}}
	const n = 40
	// burst sends n datagrams from one socket (one flow, one NAT entry)
	// and returns how the exporting gateway's counters moved.
	burst := func() (exported, unknown uint64) {
		t.Helper()
		before := counters(t, c.db)
		out := strings.TrimSpace(testenv.Run(t, "ip", "netns", "exec", c.ca, "python3", "-c", udpTool, "burst", "10.96.0.10", "5353", "100", strconv.Itoa(n)))
		if out != strconv.Itoa(n) {
			t.Fatalf("the client sent %s of %d datagrams", out, n)
		}
		after := counters(t, c.db)
		return after["export_rx_packets"] - before["export_rx_packets"], after["unknown_service_drops"] - before["unknown_service_drops"]
	}
	// Every CPU that takes the client's packets copies the export.
	for range 3 {
		if e, u := burst(); e != n || u != 0 {
			t.Fatalf("with the export: %d of %d datagrams exported, %d dropped as for no service", e, n, u)
		}
	}
	must(t, c.db.SetExports(map[Service]Export{}))
	if e, u := burst(); e != 0 || u != n {
		t.Errorf("export taken out: %d of %d datagrams still exported, %d dropped as for no service", e, n, u)
	}
	must(t, c.db.SetExports(all))
	if e, u := burst(); e != n || u != 0 {
		t.Errorf("export put back: %d of %d datagrams exported, %d dropped as for no service", e, n, u)
	}
}

package gateway_test

import (
	"bufio"
	byteorder "encoding/binary"
	"maps"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/packet"
)

// TestPacketModeUnderlayMTU: gateways without packet.underlay-mtu size
// their programs by their routes to the peer gateway. On the setup's
// 1500-byte veths that is 1500; the WAN link raised to 9000 bytes (and the
// LANs with it), both follow without a restart — strait_packet_underlay_mtu
// 9000, SYNs clamped to 8910 in the pinned settings, the VXLAN device at
// 8950 — and the import still carries TCP and UDP; lowered to 4000, they
// follow again. A gateway sized for 1500 whatever its links (the old
// default) fails at the first change.
func TestPacketModeUnderlayMTU(t *testing.T) {
	e := setupPacket(t, gateway.DataPlanePacket, gateway.DataPlanePacket, false)
	dataPlane(t, e.a, "b", func(d gateway.PeerDataPlane) bool { return d.Active && d.Imports }, "packet mode on a")
	dataPlane(t, e.b, "a", func(d gateway.PeerDataPlane) bool { return d.Active && d.Exports }, "packet mode on b")
	const metric = "strait_packet_underlay_mtu"
	for _, g := range []*gw{e.a, e.b} {
		g.waitMetric(t, metric, func(v float64) bool { return v == 1500 }, "sized for the 1500-byte WAN")
	}
	links := [][2]string{{e.ga, "wan"}, {e.gb, "wan"}, {e.ga, "lan"}, {e.ca, "eth0"}, {e.gb, "lan"}, {e.sb, "eth0"}}
	for _, mtu := range []int{9000, 4000} {
		for _, l := range links {
			testenv.Run(t, "ip", "-n", l[0], "link", "set", l[1], "mtu", strconv.Itoa(mtu))
		}
		for _, g := range []*gw{e.a, e.b} {
			g.waitMetric(t, metric, func(v float64) bool { return v == float64(mtu) }, "sized for the WAN link after its MTU changed")
		}
		for _, ns := range []string{e.ga, e.gb} {
			d, err := packet.Load(packet.Config{Name: ns, PinRoot: e.pins}, nil)
			if err != nil {
				t.Fatal(err)
			}
			mss, err := d.MSS()
			d.Close()
			if err != nil {
				t.Fatal(err)
			}
			if int(mss) != mtu-90 {
				t.Errorf("%s: the programs clamp SYNs to %d, want %d for a %d-byte underlay", ns, mss, mtu-90, mtu)
			}
			out := testenv.Run(t, "ip", "-n", ns, "-o", "link", "show", "type", "vxlan")
			if want := "mtu " + strconv.Itoa(mtu-50) + " "; !strings.Contains(out, want) {
				t.Errorf("%s: VXLAN device %s, want %s", ns, strings.TrimSpace(out), want)
			}
		}
		e.curl(t, strings.Repeat("jumbo ", 50000))
		e.udp(t, mtu-500)
	}
	if !strings.Contains(e.a.proc.out.String(), "packet mode: underlay MTU") {
		t.Errorf("a did not log its underlay MTU:\n%s", e.a.proc.out.String())
	}
}

// TestPacketModeUnderlayMTUConfigured: packet.underlay-mtu is used as it
// is, even above what the routes allow (then logged as a warning): a sized
// for 9000 bytes on the setup's 1500-byte links clamps SYNs to 8910, and
// its tunnel packets that do not fit are fragmented on the underlay, not
// lost; b, not configured, follows its routes.
func TestPacketModeUnderlayMTUConfigured(t *testing.T) {
	e := setupPacketWith(t, gateway.DataPlanePacket, gateway.DataPlanePacket, false, ", underlay-mtu: 9000")
	dataPlane(t, e.a, "b", func(d gateway.PeerDataPlane) bool { return d.Active && d.Imports }, "packet mode on a")
	dataPlane(t, e.b, "a", func(d gateway.PeerDataPlane) bool { return d.Active && d.Exports }, "packet mode on b")
	const metric = "strait_packet_underlay_mtu"
	e.a.waitMetric(t, metric, func(v float64) bool { return v == 9000 }, "sized as configured")
	e.b.waitMetric(t, metric, func(v float64) bool { return v == 1500 }, "sized for its route")
	d, err := packet.Load(packet.Config{Name: e.ga, PinRoot: e.pins}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mss, err := d.MSS()
	d.Close()
	if err != nil || mss != 8910 {
		t.Errorf("a's programs clamp SYNs to %d (%v), want 8910 as configured", mss, err)
	}
	e.curl(t, strings.Repeat("configured ", 20000))
	e.udp(t, 1400)
	if log := e.a.proc.out.String(); !strings.Contains(log, "larger-than") {
		t.Errorf("a did not warn that its underlay-mtu exceeds its route:\n%s", log)
	}
}

// TestPacketModePeerMSS: one MSS per peer gateway, sized for the route to
// it. With b2's link at 9000 bytes and b1's at 1500, a's peers map clamps
// SYNs through b2 to 8910 and through b1 to 1410 (and b2's and b1's clamp
// theirs toward a alike), while the programs' own
// MSS (and strait_packet_underlay_mtu) stay sized for the narrowest route:
// a 9000-byte path is no longer held to a 1500-byte one's segments.
func TestPacketModePeerMSS(t *testing.T) {
	e := setupPacket(t, gateway.DataPlanePacket, gateway.DataPlanePacket, true)
	dataPlane(t, e.a, "b", func(d gateway.PeerDataPlane) bool { return d.Active && d.Imports }, "packet mode on a")
	for _, l := range [][2]string{{e.ga, "wan2"}, {e.gb2, "wan"}} {
		testenv.Run(t, "ip", "-n", l[0], "link", "set", l[1], "mtu", "9000")
	}
	// Each side clamps: a the import's SYN, b and b2 the SYN arriving
	// from a and the target's SYN-ACK going back, so the end-to-end check
	// below needs all three to have read their routes again (at their
	// next sync, within a second).
	peers := map[string]*ebpf.Map{e.ga: e.pinnedMap(t, e.ga, "peers"), e.gb: e.pinnedMap(t, e.gb, "peers"), e.gb2: e.pinnedMap(t, e.gb2, "peers")}
	mssOf := func(node, addr string) uint16 {
		var v [8]byte
		if err := peers[node].Lookup(netip.MustParseAddr(addr).As4(), &v); err != nil {
			return 0
		}
		return uint16(byteorder.NativeEndian.Uint32(v[4:]) >> 16)
	}
	type entry struct{ node, peer string }
	want := map[entry]uint16{{e.ga, e.b.addr}: 1410, {e.ga, e.b2.addr}: 8910, {e.gb, e.a.addr}: 1410, {e.gb2, e.a.addr}: 8910}
	for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
		got := map[entry]uint16{}
		for k := range want {
			got[k] = mssOf(k.node, k.peer)
		}
		if maps.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the peers maps clamp SYNs to %v, want %v", got, want)
		}
	}
	e.a.waitMetric(t, "strait_packet_underlay_mtu", func(v float64) bool { return v == 1500 }, "the programs' MSS sized for the narrowest route")

	// End to end, with b2's whole path at 9000 bytes (both LANs too) and
	// the VXLAN device sized for b1's 1500: the server's end of a
	// connection through b2 sends 8898-byte segments (a's clamp of the
	// client's SYN to 8910, less TCP timestamps), through b1 1398, and a
	// 200 KB echo crosses each — the device's smaller MTU does not hold
	// back what the programs redirect into it.
	for _, l := range [][2]string{{e.ga, "lan"}, {e.ca, "eth0"}, {e.gb2, "lan"}, {e.sb, "eth1"}} {
		testenv.Run(t, "ip", "-n", l[0], "link", "set", l[1], "mtu", "9000")
	}
	client := exec.Command("ip", "netns", "exec", e.ca, "python3", "-c", mssEcho, packetVIP, "80", "24", "200000")
	stdin, err := client.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := client.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close() // the client closes its connections and exits
		_ = client.Wait()
	}()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "24 ok" {
		t.Fatalf("24 echoes of 200 KB over the import, held open: %q", line)
	}
	// The server's ends of the 24 connections, and the MSS each sends with.
	seen := map[string]int{}
	for _, m := range regexp.MustCompile(`\bmss:(\d+)`).FindAllStringSubmatch(
		testenv.Run(t, "ip", "netns", "exec", e.sb, "ss", "-tin", "state", "established", "( sport = :8080 )"), -1) {
		seen[m[1]]++
	}
	if seen["8898"] == 0 || seen["1398"] == 0 || seen["8898"]+seen["1398"] != 24 {
		t.Errorf("the server's 24 connections send segments of %v bytes, want 8898 (through b2) and 1398 (through b1)", seen)
	}
}

// mssEcho opens n connections to host:port, one after the other (each its
// own source port, so Maglev spreads them), posts size bytes on each to the
// HTTP echo and reads the echo back, keeping every connection open; then
// prints "n ok" (or what went wrong) and holds them until stdin closes.
const mssEcho = `
import os, socket, sys
host, port, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
body = os.urandom(size // 2).hex().encode()
conns, ok = [], 0
for _ in range(n):
    s = socket.create_connection((host, port), timeout=10)
    conns.append(s)
    s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while not got.endswith(body) and len(got) < 2 * len(body):
        b = s.recv(1 << 16)
        if not b:
            break
        got += b
    ok += got.endswith(body)
print("%d ok" % ok if ok == n else "%d of %d echoes whole" % (ok, n), flush=True)
sys.stdin.read()
`

package packet

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
)

// tcpMSS is a TCP server and client that report the MSS their connection
// sends with (TCP_MAXSEG), run with python3:
//
//	serve ADDR PORT        accept one connection, read it to its end and
//	                       print the accepted socket's MSS
//	send ADDR PORT SIZE    send SIZE bytes and print the socket's MSS
const tcpMSS = `
import socket, sys
if sys.argv[1] == "serve":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[2], int(sys.argv[3])))
    s.listen(1)
    print("listening", flush=True)
    c, _ = s.accept()
    while c.recv(1 << 16):
        pass
    print("mss", c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG), flush=True)
else:
    c = socket.create_connection((sys.argv[2], int(sys.argv[3])), timeout=10)
    c.sendall(b"x" * int(sys.argv[4]))
    print("mss", c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG))
    c.close()
`

// TestRouteMTU: the route to a loopback address leaves by lo, whose MTU
// it reports, capped at the largest IPv4 packet (lo has 65536); what the
// packet mode cannot carry is refused by name.
func TestRouteMTU(t *testing.T) {
	b, err := os.ReadFile("/sys/class/net/lo/mtu")
	if err != nil {
		t.Skip("no /sys/class/net/lo:", err)
	}
	want, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	want = min(want, 65535)
	got, err := RouteMTU(netip.MustParseAddr("127.0.0.1"))
	must(t, err)
	if got.MTU != want || got.Device != "lo" {
		t.Errorf("RouteMTU(127.0.0.1) = %v, want %d via lo", got, want)
	}
	p, ok, err := UnderlayPathMTU([]netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("::1")})
	if !ok || p.MTU != want || err == nil || !strings.Contains(err.Error(), "IPv4 only") {
		t.Errorf("UnderlayPathMTU(127.0.0.2, ::1) = %v, %v, %v: want lo's MTU and an error naming IPv4", p, ok, err)
	}
}

// TestNamespacesMTU: the packet path over a 9000-byte underlay and LANs.
// Sized for it (--underlay-mtu 9000), TCP agrees on ~8900-byte segments
// (the SYNs clamped to 8910, not 1410) and an 8000-byte UDP datagram
// crosses whole. With the server's LAN at 1500 bytes, a datagram of 4000
// bytes that fits the client's LAN and the underlay does not fit the
// server's: the exporting gateway answers it with ICMP "fragmentation
// needed" (MTU 1500), the client lowers its path MTU and the next
// datagram, fragmented by the client, is echoed. Then the same with the
// client's LAN at 1500: the server's whole 4000-byte reply is answered by
// the importing gateway, the error reaches the server translated, and its
// next reply comes fragmented. Without the programs' answers the big
// datagrams vanish at the narrow LAN (a veth drops what its MTU does not
// take) and no echo comes back.
func TestNamespacesMTU(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3")
	}
	c := newClusters(t, "packet")
	ca, ga, gb, sb, bin, pins, da, db := c.ca, c.ga, c.gb, c.sb, c.bin, c.pins, c.da, c.db
	nsRun := func(ns string, args ...string) string {
		t.Helper()
		return testenv.Run(t, "ip", append([]string{"netns", "exec", ns}, args...)...)
	}
	// setMTU sets the MTU of both ends of a veth link.
	setMTU := func(mtu int, ends ...[2]string) {
		t.Helper()
		for _, e := range ends {
			testenv.Run(t, "ip", "-n", e[0], "link", "set", e[1], "mtu", strconv.Itoa(mtu))
		}
	}
	clientLAN := [][2]string{{ga, "lan"}, {ca, "eth0"}}
	serverLAN := [][2]string{{gb, "lan"}, {sb, "eth0"}}
	setMTU(9000, append(append([][2]string{{ga, "wan"}, {gb, "wan"}}, clientLAN...), serverLAN...)...)
	testenv.Run(t, "ip", "netns", "exec", ga, bin, "packet", "attach", "--name", ga, "--pin-root", pins, "--lan", "lan", "--underlay-mtu", "9000")
	testenv.Run(t, "ip", "netns", "exec", gb, bin, "packet", "attach", "--name", gb, "--pin-root", pins, "--lan", "lan", "--snat", "10.2.0.254", "--underlay-mtu", "9000")
	for _, g := range []struct {
		ns string
		d  *Datapath
	}{{ga, da}, {gb, db}} {
		mss, err := g.d.MSS()
		must(t, err)
		if mss != 8910 {
			t.Errorf("%s: the programs clamp SYNs to %d, want 8910 on a 9000-byte underlay", g.ns, mss)
		}
		cfg := Config{Name: g.ns}
		cfg.defaults()
		if out := nsRun(g.ns, "cat", "/sys/class/net/"+cfg.Tunnel+"/mtu"); strings.TrimSpace(out) != "8950" {
			t.Errorf("%s: VXLAN device MTU %s, want 8950", g.ns, strings.TrimSpace(out))
		}
	}

	// TCP: both ends send segments of the underlay's size less VXLAN's
	// and the headers (8910 less 12 bytes of timestamps).
	srv := exec.Command("ip", "netns", "exec", sb, "python3", "-u", "-c", tcpMSS, "serve", "10.2.0.2", "5201")
	var srvOut strings.Builder
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	must(t, srv.Start())
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		<-srvDone
	})
	var client string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		o, err := exec.Command("ip", "netns", "exec", ca, "python3", "-c", tcpMSS, "send", "10.96.0.10", "5201", "1000000").CombinedOutput()
		if client = strings.TrimSpace(string(o)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TCP through the packet path: %v: %s", err, client)
		}
	}
	select {
	case err := <-srvDone:
		srvDone <- err // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("the TCP server did not finish after the client's connection closed")
	}
	server := strings.TrimSpace(strings.TrimPrefix(srvOut.String(), "listening\n"))
	for _, m := range []struct{ side, out string }{{"client", client}, {"server", server}} {
		if mss := mssOf(m.out); mss < 8800 || mss > 8910 {
			t.Errorf("%s's MSS %q: want 8800..8910 on a 9000-byte path (1398 is a 1500-byte one)", m.side, m.out)
		}
	}

	// UDP: a datagram that fits the 9000-byte LANs crosses unfragmented.
	testenv.Start(t, "ip", "netns", "exec", sb, "python3", "-c", udpTool, "echo", "10.2.0.2", "5353")
	ask := func(size, want string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			out := strings.TrimSpace(nsRun(ca, "python3", "-c", udpTool, "ask", "10.96.0.10", "5353", size))
			if out == want || time.Now().After(deadline) {
				return out
			}
		}
	}
	frags := counters(t, da)["fragmented_datagrams"]
	if out := ask("8000", "ok"); out != "ok" {
		t.Errorf("UDP of 8000 bytes over 9000-byte links: %s\nga: %v\ngb: %v", out, counters(t, da), counters(t, db))
	}
	if n := counters(t, da)["fragmented_datagrams"]; n != frags {
		t.Errorf("the 8000-byte datagram was fragmented (fragmented_datagrams %d → %d)", frags, n)
	}

	// The server's LAN at 1500: the exporting gateway answers the first
	// 4000-byte datagram; the client fragments the next ones.
	setMTU(1500, serverLAN...)
	if out := ask("4000", "ok"); out != "ok" {
		t.Errorf("UDP of 4000 bytes toward a 1500-byte server LAN: %s\nga: %v\ngb: %v", out, counters(t, da), counters(t, db))
	}
	if counters(t, db)["too_big_drops"] == 0 {
		t.Errorf("the exporting gateway answered no packet as too big: %v", counters(t, db))
	}
	if out := nsRun(ca, "ip", "route", "get", "10.96.0.10"); !strings.Contains(out, "mtu 1500") {
		t.Errorf("the client's path MTU to the clusterset IP was not lowered: %s", out)
	}
	// Datagrams that ignore the path MTU, back to back: each is answered,
	// not only the first that reads the device's MTU in its jiffy (the
	// programs keep it per CPU for a tick, too_big), and one that fits
	// still crosses.
	const burst = 50
	tooBig := counters(t, db)["too_big_drops"]
	if out := strings.TrimSpace(nsRun(ca, "python3", "-c", udpTool, "burst", "10.96.0.10", "5353", "4000", strconv.Itoa(burst))); out != strconv.Itoa(burst) {
		t.Fatalf("the client sent %s of %d datagrams", out, burst)
	}
	if n := counters(t, db)["too_big_drops"] - tooBig; n < burst {
		t.Errorf("%d datagrams of 4000 bytes toward a 1500-byte LAN sent back to back: %d answered as too big", burst, n)
	}
	if out := ask("1400", "ok"); out != "ok" {
		t.Errorf("UDP of 1400 bytes after the burst: %s", out)
	}

	// The client's LAN at 1500 and the server's back at 9000: the server's
	// whole reply is too big for the client's LAN.
	setMTU(9000, serverLAN...)
	setMTU(1500, clientLAN...)
	if out := ask("4000", "ok"); out != "ok" {
		t.Errorf("UDP of 4000 bytes from a 1500-byte client LAN: %s\nga: %v\ngb: %v", out, counters(t, da), counters(t, db))
	}
	if counters(t, da)["too_big_drops"] == 0 {
		t.Errorf("the importing gateway answered no reply as too big: %v", counters(t, da))
	}
	if out := nsRun(sb, "ip", "route", "get", "10.2.0.254"); !strings.Contains(out, "mtu 1500") {
		t.Errorf("the server's path MTU to the SNAT address was not lowered: %s", out)
	}
}

// mssOf reads the number in "mss N".
func mssOf(s string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "mss "))
	if err != nil {
		return -1
	}
	return n
}

// TestWatchMTU: a link whose MTU changes is reported (a veth in a
// namespace of its own, its MTU switched until the watcher, subscribed in
// that namespace, says so), and the watcher returns when its context ends.
func TestWatchMTU(t *testing.T) {
	testenv.RequireRoot(t)
	ns := testenv.Netns(t, testenv.UniqueName("wmtu"))
	testenv.Run(t, "ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // a failed test's watcher ends too
	changes := make(chan struct{}, 1)
	ended := make(chan error, 1)
	go func() {
		ended <- testenv.InNetns(ns, func() error {
			return WatchMTU(ctx, func() {
				select {
				case changes <- struct{}{}:
				default:
				}
			})
		})
	}()
	// Until the subscription is up a change goes unseen: switch the MTU
	// until one is reported.
	mtu := 1500
	for deadline := time.Now().Add(30 * time.Second); ; {
		mtu = 4500 - mtu // 1500 ↔ 3000
		testenv.Run(t, "ip", "-n", ns, "link", "set", "d0", "mtu", strconv.Itoa(mtu))
		select {
		case <-changes:
		case err := <-ended:
			t.Fatalf("the watcher ended before any change: %v", err)
		case <-time.After(100 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("no MTU change reported")
			}
			continue
		}
		break
	}
	cancel()
	if err := <-ended; err != nil {
		t.Errorf("WatchMTU after its context ended: %v", err)
	}
}

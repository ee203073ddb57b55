package gateway_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/internal/testenv"
)

// flowsClient drives the flow-map test from the client's namespace, with
// python3 on real sockets:
//
//	hold ADDR        an HTTP/1.1 keep-alive connection to ADDR:80: one
//	                 echo request, "first ok", then a second request on the
//	                 same connection at each line on stdin, "again ok"
//	udp ADDR N PORT  N UDP flows to ADDR:5353, each from a socket of its
//	                 own kept open, bound to source ports PORT to
//	                 PORT+N-1, each answered (one retry); prints
//	                 "answered K"
const flowsClient = `
import http.client, socket, sys
if sys.argv[1] == "hold":
    c = http.client.HTTPConnection(sys.argv[2], 80, timeout=5)
    i = 0
    while True:
        body = ("request %d " % i) * 50
        c.request("POST", "/", body=body, headers={"Connection": "keep-alive"})
        r = c.getresponse().read().decode()
        print(("first" if i == 0 else "again") + (" ok" if r == body else " mismatch"), flush=True)
        i += 1
        if not sys.stdin.readline():
            sys.exit(0)
socks, answered = [], 0
for i in range(int(sys.argv[3])):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("", int(sys.argv[4]) + i))
    s.settimeout(1)
    s.connect((sys.argv[2], 5353))
    socks.append(s)
    for attempt in range(2):
        try:
            s.send(b"flow %d" % i)
            if s.recv(100) == b"flow %d" % i:
                answered += 1
                break
        except socket.timeout:
            pass
print("answered", answered, flush=True)
`

// TestPacketModeFlowMapFull: an importing gateway whose flow map holds 16
// flows (packet.flow-entries) carries a keep-alive TCP connection and then
// UDP flows from as many ports, 100 at a time, until the connection's
// entry is evicted. Every flow is answered and nothing is dropped; the map
// holds at most its size (strait_packet_flow_map_entries and _size on
// /metrics); every flow is counted as a placement (import_flows), so the
// evictions are the placements beyond what the map holds; and the
// evicted connection goes on: its next packet is placed again by the
// Maglev table, on the same gateway (docs/packet.md, "A full flow map").
// A restart adopts the full map's pins.
func TestPacketModeFlowMapFull(t *testing.T) {
	if _, err := exec.LookPath("bpftool"); err != nil {
		t.Skip("needs bpftool (scripts/bpf.sh installs it) to see the connection's entry evicted")
	}
	e := setupPacketWith(t, gateway.DataPlanePacket, gateway.DataPlanePacket, false, ", flow-entries: 16")
	active := func(d gateway.PeerDataPlane) bool { return d.Active }
	dataPlane(t, e.a, "b", active, "packet mode on a")
	dataPlane(t, e.b, "a", active, "packet mode on b")
	script := filepath.Join(tmpDir, "flows.py")
	if err := os.WriteFile(script, []byte(flowsClient), 0o644); err != nil {
		t.Fatal(err)
	}
	const (
		placed  = `strait_packet_events_total{event="import_flows"}`
		entries = "strait_packet_flow_map_entries"
		size    = "strait_packet_flow_map_size"
	)
	drops := func() float64 {
		var sum float64
		for k, v := range e.a.metrics(t) {
			if strings.HasPrefix(k, "strait_packet_drops_total") || strings.HasPrefix(k, "strait_packet_policy_drops_total") {
				sum += v
			}
		}
		return sum
	}
	if m := e.a.metrics(t); m[size] != 16 {
		t.Fatalf("%s = %v, want 16 (packet.flow-entries)", size, m[size])
	}
	drops0 := drops()

	hold := exec.Command("ip", "netns", "exec", e.ca, "python3", script, "hold", packetVIP)
	stdin, err := hold.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testenv.Output
	hold.Stdout, hold.Stderr = &out, &out
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hold.Process.Kill(); _ = hold.Wait() })
	waitOutput := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(patience); !strings.Contains(out.String(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("keep-alive connection: %q, want %q", out.String(), want)
			}
		}
	}
	waitOutput("first ok")
	before := e.a.metric(t, placed)
	// The last scrape before the flows: its count of the flow map serves
	// /metrics until gateway.FlowMapRefresh after it.
	counted := time.Now()

	// The kernel's LRU is approximate (entries looked up since the last
	// pass get a second chance), so the connection's entry is evicted
	// after some number of newer flows, not after 16: flows are added
	// until bpftool finds it gone from the pinned map.
	flows := filepath.Join(e.pins, e.ga, "flows")
	tcpPinned := func() bool {
		b, err := exec.Command("bpftool", "-j", "map", "dump", "pinned", flows).Output()
		if err != nil {
			t.Fatalf("bpftool map dump pinned %s: %v", flows, err)
		}
		return strings.Contains(string(b), `"proto":6`)
	}
	if !tcpPinned() {
		t.Fatal("the keep-alive connection has no flow entry")
	}
	sent := 0
	for round := 0; tcpPinned(); round++ {
		if round == 10 {
			t.Fatalf("the keep-alive connection's entry outlived %d newer flows in a 16-entry map", sent)
		}
		// Each round's flows come from ports of their own, below the
		// ephemeral range: a port the kernel handed out again would be
		// a flow the map may still hold, placed by no one.
		port := strconv.Itoa(20000 + 100*round)
		b, err := exec.Command("ip", "netns", "exec", e.ca, "python3", script, "udp", packetVIP, "100", port).CombinedOutput()
		if got := strings.TrimSpace(string(b)); err != nil || got != "answered 100" {
			t.Fatalf("100 UDP flows through a 16-entry flow map: %v, %s", err, got)
		}
		sent += 100
	}
	t.Logf("the connection's entry evicted after %d newer flows", sent)
	// The kernel's LRU map also evicts a little before it is full (it
	// keeps free entries per CPU): it holds at most its size. The scrape
	// waits for a count taken after the flows.
	time.Sleep(time.Until(counted.Add(gateway.FlowMapRefresh)))
	m := e.a.metrics(t)
	if m[entries] < 1 || m[entries] > 16 {
		t.Errorf("%s = %v after %d flows, want 1..16", entries, m[entries], sent+1)
	}
	if got := m[placed] - before; got < float64(sent) {
		t.Errorf("import_flows rose by %v for %d new flows, want at least %d", got, sent, sent)
	}

	// The connection's entry is among the oldest: evicted, placed again.
	afterUDP := m[placed]
	if _, err := fmt.Fprintln(stdin); err != nil {
		t.Fatal(err)
	}
	waitOutput("again ok")
	if got := e.a.metric(t, placed) - afterUDP; got < 1 {
		t.Errorf("the keep-alive connection's next request placed no flow (import_flows +%v), its entry evicted", got)
	}
	if d := drops() - drops0; d != 0 {
		t.Errorf("drops rose by %v with a full flow map, want 0", d)
	}

	// The full map's pins are adopted by a restart (same size).
	stop(t, e.a)
	e.a.start(t)
	e.a.waitLive(t, "b", 1)
	dataPlane(t, e.a, "b", active, "packet mode after restart")
	if _, err := fmt.Fprintln(stdin); err != nil {
		t.Fatal(err)
	}
	waitOutput("again ok\nagain ok")
	e.udp(t, 100)
	if !strings.Contains(e.a.proc.out.String(), "adopted pinned link") {
		t.Errorf("the restarted gateway did not adopt the pinned links:\n%s", e.a.proc.out.String())
	}
}

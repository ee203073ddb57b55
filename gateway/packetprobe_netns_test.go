package gateway_test

import (
	byteorder "encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/strait-net/strait/gateway"
)

// a's metrics about b's two gateways in the packet mode's maps and probes.
const (
	packetUp2      = `strait_packet_gateway_up{gateway="192.0.3.2:4443",peer="b"}`
	packetAnswers1 = `strait_packet_probe_answers_total{gateway="192.0.2.2:4443",peer="b"}`
	packetAnswers2 = `strait_packet_probe_answers_total{gateway="192.0.3.2:4443",peer="b"}`
	packetDowns1   = `strait_packet_probe_downs_total{gateway="192.0.2.2:4443",peer="b"}`
	packetDowns2   = `strait_packet_probe_downs_total{gateway="192.0.3.2:4443",peer="b"}`
)

// waitProbed waits until a's prober has answers from both of b's
// gateways' programs.
func (e *packetEnv) waitProbed(t *testing.T) {
	t.Helper()
	e.a.waitMetric(t, packetAnswers1, func(v float64) bool { return v > 0 }, "b1's programs answer a's probes")
	e.a.waitMetric(t, packetAnswers2, func(v float64) bool { return v > 0 }, "b2's programs answer a's probes")
}

// pinnedMap opens one of a gateway node's pinned maps, read-only.
func (e *packetEnv) pinnedMap(t *testing.T, node, name string) *ebpf.Map {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(filepath.Join(e.pins, node, name), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("pinned map %s of %s: %v", name, node, err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// waitPeerAlive polls a's pinned peers map (the programs' own view: a
// flow's gateway is taken out when its entry says dead, after the Maglev
// table was rewritten) every millisecond until gateway addr's alive flag
// is alive, and returns when it saw it so.
func (e *packetEnv) waitPeerAlive(t *testing.T, addr string, alive bool, what string) time.Time {
	t.Helper()
	m := e.pinnedMap(t, e.ga, "peers")
	key := netip.MustParseAddr(addr).As4()
	var v [8]byte
	for deadline := time.Now().Add(patience); ; time.Sleep(time.Millisecond) {
		now := time.Now()
		if err := m.Lookup(key, &v); err == nil && (byteorder.NativeEndian.Uint32(v[4:])&1 == 1) == alive {
			return now
		}
		if now.After(deadline) {
			t.Fatalf("%s: a's peers map says alive=%v for %s after %v", what, !alive, addr, patience)
		}
	}
}

// pinnedFlows is a's flows map: each client port's gateway (the flows of
// one client address to one service).
func (e *packetEnv) pinnedFlows(t *testing.T) map[int]netip.Addr {
	t.Helper()
	m := e.pinnedMap(t, e.ga, "flows")
	out := map[int]netip.Addr{}
	var k, v [16]byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		// flow_key: saddr, daddr, sport, dport (network order), proto.
		out[int(byteorder.BigEndian.Uint16(k[8:]))] = netip.AddrFrom4([4]byte(v[:4]))
	}
	if err := it.Err(); err != nil {
		t.Fatalf("a's flows map: %v", err)
	}
	return out
}

// programRx is the export packets a gateway node's programs translated,
// read from its pinned counters (its process may be dead).
func (e *packetEnv) programRx(t *testing.T, node string) uint64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", node, binary, "packet", "counters", "--name", node, "--pin-root", e.pins).Output()
	if err != nil {
		t.Fatalf("strait packet counters of %s: %v", node, err)
	}
	var c map[string]uint64
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatalf("strait packet counters of %s: %v: %s", node, err, out)
	}
	return c["export_rx_packets"]
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// holdClient holds n keep-alive HTTP connections to an echo server and
// sends a request on each every few milliseconds, checking each answer:
//
//	hold ADDR PORT N EVERY_MS
//
// It prints "ready PORT..." (the connections' local ports) once connected,
// "broken I ERROR" when connection I fails (it is not used again), and
// every 100 ms "counts C..." (answers per connection) and "maxgap G..."
// (the longest wait between two answers of each, ms).
const holdClient = `
import socket, sys, time
host, port, n, every = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]) / 1000
conns = []
for i in range(n):
    s = socket.create_connection((host, port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conns.append(s)
print("ready", " ".join(str(s.getsockname()[1]) for s in conns), flush=True)

def echo(s, body):
    s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d:
            raise EOFError("closed by the server")
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(rest) < length:
        d = s.recv(4096)
        if not d:
            raise EOFError("closed by the server")
        rest += d
    if rest != body:
        raise ValueError("echo mismatch %r" % rest[:40])

counts, gaps, broken = [0] * n, [0.0] * n, [False] * n
last = [time.monotonic()] * n
seq, report = 0, 0.0
while True:
    t0 = time.monotonic()
    for i, s in enumerate(conns):
        if broken[i]:
            continue
        seq += 1
        try:
            echo(s, b"hold %d" % seq)
        except Exception as e:
            broken[i] = True
            print("broken", i, repr(e), flush=True)
            continue
        now = time.monotonic()
        gaps[i] = max(gaps[i], now - last[i])
        last[i] = now
        counts[i] += 1
    if t0 >= report:
        print("counts", " ".join(map(str, counts)), flush=True)
        print("maxgap", " ".join("%.1f" % (g * 1000) for g in gaps), flush=True)
        report = t0 + 0.1
    time.sleep(max(0, every - (time.monotonic() - t0)))
`

// lastLine returns the fields after prefix of out's last complete line
// starting with prefix, nil if there is none.
func lastLine(out, prefix string) []string {
	out = out[:strings.LastIndexByte(out, '\n')+1] // a line being written is not read
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if f := strings.Fields(lines[i]); len(f) > 0 && f[0] == prefix {
			return f[1:]
		}
	}
	return nil
}

func ints(t *testing.T, f []string) []int {
	t.Helper()
	out := make([]int, len(f))
	for i, s := range f {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("bad count %q", s)
		}
		out[i] = n
	}
	return out
}

// TestPacketModeKillPinned: b has two gateways; long-lived connections
// through the packet mode, pinned to both, echo every 5 ms while b2's
// gateway *process* is killed -9. Its pinned programs keep forwarding and
// answering a's probes, so a keeps b2 in its maps although b2's sessions
// are gone (the stream mode's health says dead): every connection keeps
// working, on the gateway it was pinned to, and new flows still spread
// over both nodes' programs (docs/packet.md, "Health").
func TestPacketModeKillPinned(t *testing.T) {
	// A generous miss count: what is tested here is that the programs'
	// answers keep b2, not how fast silence is found, and a false down on
	// a loaded host would move (and break) the pinned connections.
	e := setupPacketWith(t, gateway.DataPlanePacket, gateway.DataPlanePacket, true, ", probe-misses: 20")
	active := func(d gateway.PeerDataPlane) bool { return d.Active }
	dataPlane(t, e.a, "b", active, "packet mode on a")
	exports := func(d gateway.PeerDataPlane) bool { return d.Active && d.Exports }
	dataPlane(t, e.b, "a", exports, "a's offer heard on b1")
	dataPlane(t, e.b2, "a", exports, "a's offer heard on b2")
	e.waitProbed(t)
	e.curl(t, "the packet mode carries")

	script := filepath.Join(tmpDir, "hold.py")
	if err := os.WriteFile(script, []byte(holdClient), 0o644); err != nil {
		t.Fatal(err)
	}
	// 16 connections: all on one of two gateways is a one in 32768 chance.
	const n = 16
	client := startIn(t, e.ca, "python3", script, "hold", packetVIP, "80", strconv.Itoa(n), "5")
	var ports []int
	for deadline := time.Now().Add(patience); ports == nil; time.Sleep(20 * time.Millisecond) {
		if f := lastLine(client.out.String(), "ready"); f != nil {
			ports = ints(t, f)
		}
		select {
		case <-client.done:
			t.Fatalf("the client ended: %v\n%s", client.err, client.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client did not connect: %s", client.out.String())
		}
	}
	pins := e.pinnedFlows(t)
	onB2 := 0
	for _, p := range ports {
		switch pins[p] {
		case netip.MustParseAddr(e.b2.addr):
			onB2++
		case netip.MustParseAddr(e.b.addr):
		default:
			t.Fatalf("connection from port %d is pinned to %v, not to one of b's gateways", p, pins[p])
		}
	}
	if onB2 == 0 || onB2 == n {
		t.Fatalf("%d of %d connections pinned to b2: want some on each gateway", onB2, n)
	}
	counts := func() []int {
		t.Helper()
		if strings.Contains(client.out.String(), "broken") {
			t.Fatalf("a long-lived connection broke:\n%s", client.out.String())
		}
		return ints(t, lastLine(client.out.String(), "counts"))
	}
	// progress waits until every connection answered more than 20 times
	// since from.
	progress := func(from []int, what string) []int {
		t.Helper()
		for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
			c := counts()
			ok := len(c) == n
			for i := range c {
				ok = ok && c[i] > from[i]+20
			}
			if ok {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the connections answered %v times, %v before", what, c, from)
			}
		}
	}
	before := progress(make([]int, n), "before the kill")
	rx2 := e.programRx(t, e.gb2)

	e.b2.proc.kill()
	// The sessions' health checker sees b2's process dead: without the
	// probes, this is when its flows moved to b1 and broke.
	const up2 = "strait_peer_gateway_up{gateway=\"192.0.3.2:4443\",peer=\"b\"}"
	e.a.waitMetric(t, up2, func(v float64) bool { return v == 0 }, "b2's process seen dead by a's sessions")
	after := progress(before, "b2's process dead")
	progress(after, "b2's process dead, later")
	if v := e.a.metric(t, packetUp2); v != 1 {
		t.Errorf("a's maps took b2 out (%s = %v) while its programs answered", packetUp2, v)
	}
	if n := e.a.metric(t, packetDowns2); n != 0 {
		t.Errorf("a's prober found b2's programs silent %v times", n)
	}
	now := e.pinnedFlows(t)
	for _, p := range ports {
		if now[p] != pins[p] {
			t.Errorf("connection from port %d moved from %v to %v", p, pins[p], now[p])
		}
	}
	if got := e.programRx(t, e.gb2); got <= rx2 {
		t.Errorf("b2's programs translated no packets while its process was dead: %d → %d", rx2, got)
	}
	// New flows still reach both nodes' programs.
	rx1, rx2 := e.b.metric(t, packetMetrB), e.programRx(t, e.gb2)
	for i := range 30 {
		e.curl(t, fmt.Sprintf("b2's process dead, new flow %d", i))
	}
	if got := e.b.metric(t, packetMetrB); got == rx1 {
		t.Errorf("no new flow reached b1")
	}
	if got := e.programRx(t, e.gb2); got == rx2 {
		t.Errorf("no new flow reached b2's programs while its process was dead")
	}
	counts()
	gaps := lastLine(client.out.String(), "maxgap")
	t.Logf("%d connections (%d on b2) kept answering through b2's kill -9; the longest wait between two answers of each, ms: %v (load %s)",
		n, onB2, gaps, loadavg())
}

package gateway_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/gateway"
)

// TestPacketModeIdleCPU measures what two idle gateways in the packet mode
// (a, and b with one gateway) cost: CPU ticks a second of each process
// from /proc/PID/stat over STRAIT_PACKET_IDLE_CPU (a duration, e.g. 10s),
// once the mode is active both ways and each side's prober heard the
// other's programs (docs/packet.md, "What the gateway processes cost").
// A figure for the log, not a threshold; skipped without the variable.
func TestPacketModeIdleCPU(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("STRAIT_PACKET_IDLE_CPU"))
	if err != nil {
		t.Skip("set STRAIT_PACKET_IDLE_CPU to a duration to measure idle gateways' CPU")
	}
	e := setupPacket(t, gateway.DataPlanePacket, gateway.DataPlanePacket, false)
	active := func(d gateway.PeerDataPlane) bool { return d.Active && d.Imports && d.Exports }
	dataPlane(t, e.a, "b", active, "packet mode on a")
	dataPlane(t, e.b, "a", active, "packet mode on b")
	e.a.waitMetric(t, `strait_packet_probe_answers_total{gateway="192.0.2.2:4443",peer="b"}`, func(v float64) bool { return v > 0 }, "b's programs answer a")
	e.b.waitMetric(t, `strait_packet_probe_answers_total{gateway="192.0.2.1:4443",peer="a"}`, func(v float64) bool { return v > 0 }, "a's programs answer b")
	// The gateways settle (the slow probes start within a second).
	time.Sleep(2 * time.Second)
	ticks := func(g *gw) int64 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(g.proc.cmd.Process.Pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		// Fields after the command's closing parenthesis: utime and stime
		// are the 12th and 13th.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		return u + s
	}
	a0, b0, start := ticks(e.a), ticks(e.b), time.Now()
	load0 := loadavg()
	time.Sleep(d)
	a1, b1, secs := ticks(e.a), ticks(e.b), time.Since(start).Seconds()
	t.Logf("idle %.1fs: a %.2f ticks/s, b %.2f ticks/s (USER_HZ 100: %% of a core); probe interval a→b %vs, b→a %vs; load %s → %s",
		secs, float64(a1-a0)/secs, float64(b1-b0)/secs,
		e.a.metric(t, `strait_peer_probe_interval_seconds{peer="b"}`), e.b.metric(t, `strait_peer_probe_interval_seconds{peer="a"}`), load0, loadavg())
}

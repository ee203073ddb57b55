package gateway_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Real clients through the interconnect, steps of TestTwoClusters.

// portIperf and portIperf+1 are the imports of two iperf3 servers in
// cluster a.
const portIperf = 8086

// testWrk runs wrk through the echo import with several keep-alive
// connections: every request must be answered with a 2xx and no socket
// may fail.
func testWrk(t *testing.T, e *env) {
	if _, err := exec.LookPath("wrk"); err != nil {
		t.Skip("needs wrk (scripts/setup.sh installs it)")
	}
	out, err := exec.Command("ip", "netns", "exec", e.client, "wrk", "-t1", "-c4", "-d1s", e.url(portEcho)).CombinedOutput()
	if err != nil {
		t.Fatalf("wrk: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(\d+) requests in`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("wrk printed no request count:\n%s", out)
	}
	if n, _ := strconv.Atoi(string(m[1])); n == 0 {
		t.Fatalf("wrk completed no request:\n%s", out)
	}
	for _, bad := range []string{"Socket errors", "Non-2xx"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("wrk reports %s:\n%s", bad, out)
		}
	}
}

// testIperf3 exports an iperf3 server and runs iperf3 through the import in
// both directions: its control and data connections are plain TCP streams
// of the interconnect. Each direction has a server of its own: iperf3
// serves one test at a time and refuses ("busy") every connection accepted
// during one, which includes the idle connections the exporting gateway
// preconnects meanwhile, so a second test through the same server could be
// handed a refused connection.
func testIperf3(t *testing.T, e *env) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("needs iperf3 (scripts/setup.sh installs it)")
	}
	host, _, _ := net.SplitHostPort(e.target)
	for i, reverse := range []bool{false, true} {
		name, port, importPort := fmt.Sprintf("iperf%d", i), strconv.Itoa(5201+i), portIperf+i
		target := net.JoinHostPort(host, port)
		startIn(t, e.server, "iperf3", "--server", "--bind", host, "--port", port)
		e.a.apply(t, exportYAML(name, target))
		e.b.apply(t, importYAML(name, e.b.addr, importPort, "a"))
		t.Cleanup(func() {
			e.b.delete(t, importYAML(name, e.b.addr, importPort, "a"))
			e.a.delete(t, exportYAML(name, target))
		})
		args := []string{"netns", "exec", e.client, "iperf3", "--client", e.b.addr, "--port", strconv.Itoa(importPort), "--time", "1", "--json"}
		if reverse {
			args = append(args, "--reverse")
		}
		var out []byte
		var err error
		// The server may still be starting; iperf3 says so by failing to
		// connect, which the first attempts may do.
		for deadline := time.Now().Add(patience); ; time.Sleep(100 * time.Millisecond) {
			if out, err = exec.Command("ip", args...).Output(); err == nil || time.Now().After(deadline) {
				break
			}
		}
		var res struct {
			Error string `json:"error"`
			End   struct {
				Received struct {
					Bytes float64 `json:"bytes"`
					BPS   float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if jerr := json.Unmarshal(out, &res); jerr != nil || err != nil || res.Error != "" {
			t.Fatalf("iperf3 (reverse %v): %v, %v, %q\n%s", reverse, err, jerr, res.Error, out)
		}
		if res.End.Received.Bytes == 0 {
			t.Fatalf("iperf3 (reverse %v) moved no bytes:\n%s", reverse, out)
		}
		t.Logf("iperf3 through the gateways (reverse %v): %.0f Mbit/s", reverse, res.End.Received.BPS/1e6)
	}
}

// testRotation issues new certificates to both clusters while a stream is
// open: both gateways load them, the open stream carries on to the end,
// and sessions dialled afterwards handshake with the new certificates.
func testRotation(t *testing.T, e *env) {
	failures := handshakeFailures(t, e.a)
	send := e.openUpload(t)
	logs := map[*gw]int{}
	for _, g := range []*gw{e.a, e.b} {
		logs[g] = strings.Count(g.proc.out.String(), "fabric identity reloaded")
		if out, err := exec.Command(binary, "fabric", "issue", g.cluster, "--dir", e.fabric).CombinedOutput(); err != nil {
			t.Fatalf("fabric issue %s: %v\n%s", g.cluster, err, out)
		}
	}
	for _, g := range []*gw{e.a, e.b} {
		for deadline := time.Now().Add(patience); strings.Count(g.proc.out.String(), "fabric identity reloaded") == logs[g]; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("gateway %s did not reload its rotated certificate:\n%s", g.cluster, g.proc.out.String())
			}
		}
	}
	out, err := send()
	want := strings.Repeat("part of a long upload\n", 100) + "more\n"
	if err != nil || out != want {
		t.Fatalf("the stream open during rotation: curl %v, echoed %d bytes, want %d", err, len(out), len(want))
	}
	// New sessions: b drops its sessions to a and dials again.
	peer := peerYAML("a", net.JoinHostPort(e.a.addr, strconv.Itoa(wanPort)))
	e.b.delete(t, peer)
	e.b.apply(t, peer)
	e.b.waitLive(t, "a", 0)
	e.mustEcho(t, portEcho, "after rotation")
	if got := handshakeFailures(t, e.a); got != failures {
		t.Errorf("a counted %v handshake failures during the rotation", got-failures)
	}
}

// handshakeFailures sums g's rejected handshakes over every reason.
func handshakeFailures(t *testing.T, g *gw) float64 {
	var sum float64
	for k, v := range g.metrics(t) {
		if strings.HasPrefix(k, "strait_handshake_failures_total") {
			sum += v
		}
	}
	return sum
}

package nodeemu_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/kube/linkemu/nodeemu"
)

// TestNodeAgent runs `strait lab node-emulate` in a namespace standing for a
// node, joined by a veth to one standing for the other cluster, and checks
// it with ping: the userspace backend adds its delay to the round trip
// (egress only: once), --reset-ports ends the connections across the link
// on those ports (both ways) before it reports ready and no others, SIGTERM
// takes everything away; the tbf backend's veth pair, left by a SIGKILLed
// agent, goes with Clean.
func TestNodeAgent(t *testing.T) {
	testenv.RequireRoot(t)
	for _, c := range []string{"ping", "bpftool"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("needs %s", c)
		}
	}
	bin := filepath.Join(t.TempDir(), "strait")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/strait-net/strait/cmd/strait").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	node := testenv.Netns(t, testenv.UniqueName("ne-node-"))
	peer := testenv.Netns(t, testenv.UniqueName("ne-peer-"))
	dev := testenv.UniqueName("ne")
	testenv.Run(t, "ip", "link", "add", dev+"a", "netns", node, "type", "veth", "peer", dev+"b", "netns", peer)
	testenv.Run(t, "ip", "-n", node, "addr", "add", "10.77.0.1/24", "dev", dev+"a")
	testenv.Run(t, "ip", "-n", peer, "addr", "add", "10.77.0.2/24", "dev", dev+"b")
	testenv.Run(t, "ip", "-n", node, "link", "set", dev+"a", "up")
	testenv.Run(t, "ip", "-n", peer, "link", "set", dev+"b", "up")
	state := func() string {
		return testenv.Run(t, "ip", "-n", node, "-o", "link", "show") + testenv.Run(t, "tc", "-n", node, "qdisc", "show") +
			testenv.Run(t, "ip", "netns", "exec", node, "bpftool", "net", "show")
	}
	base := minRTT(t, node)
	before := state()
	run := testenv.UniqueName("nodeemu-test-")
	ready := filepath.Join(t.TempDir(), "ready")

	agent := func(spec string, extra ...string) *exec.Cmd {
		cmd := exec.Command("ip", append([]string{"netns", "exec", node, bin, "lab", "node-emulate", "--run", run,
			"--remote", "10.77.0.2/32,192.0.2.0/24", "--emulation", spec, "--ready", ready}, extra...)...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("agent:\n%s", out.String())
			}
		})
		deadline := time.Now().Add(time.Minute)
		for {
			if _, err := os.Stat(ready); err == nil {
				return cmd
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent not ready after a minute:\n%s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Long-lived connections across the link, opened before the
	// emulation: the node's to the peer's port 7101, the peer's to the
	// node's dual-stack listener on 7102 (an IPv6 socket with IPv4-mapped
	// addresses, as the gateways' accepted sessions are), both to be
	// ended by --reset-ports; and the node's to the peer's 7103, to be
	// left alone.
	testenv.Start(t, "ip", "netns", "exec", peer, bin, "app", "echo", "--listen", "10.77.0.2:7101")
	testenv.Start(t, "ip", "netns", "exec", peer, bin, "app", "echo", "--listen", "10.77.0.2:7103")
	testenv.Start(t, "ip", "netns", "exec", node, bin, "app", "echo", "--listen", "[::]:7102")
	for _, c := range []struct{ netns, url string }{{node, "http://10.77.0.2:7101/"}, {peer, "http://10.77.0.1:7102/"}, {node, "http://10.77.0.2:7103/"}} {
		testenv.Start(t, "ip", "netns", "exec", c.netns, bin, "load", "seq", "--url", c.url, "--requests", "100000", "--think", "200ms")
	}
	filters := map[string]string{"7101": "dport = :7101", "7102": "sport = :7102", "7103": "dport = :7103"}
	opened := map[string][]string{}
	deadline := time.Now().Add(time.Minute)
	for port, f := range filters {
		for len(opened[port]) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no connection on port %s after a minute", port)
			}
			time.Sleep(50 * time.Millisecond)
			opened[port] = sockets(t, node, f)
		}
	}
	cmd := agent(`{"delay":"5ms"}`, "--reset-ports", "7101,7102")
	for port, f := range filters {
		now := sockets(t, node, f)
		kept := 0
		for _, s := range opened[port] {
			if slices.Contains(now, s) {
				kept++
			}
		}
		switch {
		case port == "7103" && kept != len(opened[port]):
			t.Errorf("port %s, not to be reset: %d of the connections %v left, now %v", port, kept, opened[port], now)
		case port != "7103" && kept != 0:
			t.Errorf("port %s, reset: %d of the connections %v left, now %v", port, kept, opened[port], now)
		}
	}
	if got := minRTT(t, node); got < base+4.5 {
		t.Errorf("rtt min %.3f ms with 5 ms on the node's egress, baseline %.3f", got, base)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("agent after SIGTERM: %v", err)
	}
	if got := minRTT(t, node); got > base+2 {
		t.Errorf("rtt min %.3f ms after the agent ended, baseline %.3f", got, base)
	}
	if after := state(); after != before {
		t.Errorf("node after SIGTERM:\n%s\nbefore:\n%s", after, before)
	}

	cmd = agent(`{"rate":"50mbit"}`)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	_ = os.Remove(ready)
	n := 0
	for _, l := range strings.Split(testenv.Run(t, "ip", "-n", node, "-o", "link", "show"), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], nodeemu.Prefix(run)) {
			n++
		}
	}
	if n != 2 {
		t.Errorf("after SIGKILL: %d devices named %s…, want the veth pair", n, nodeemu.Prefix(run))
	}
	testenv.Run(t, "ip", "netns", "exec", node, bin, "lab", "node-emulate", "--clean", "--run", run)
	if after := state(); after != before {
		t.Errorf("node after SIGKILL and --clean:\n%s\nbefore:\n%s", after, before)
	}
}

func minRTT(t *testing.T, netns string) float64 {
	t.Helper()
	out := testenv.Run(t, "ip", "netns", "exec", netns, "ping", "-n", "-c", "10", "-i", "0.02", "-W", "5", "10.77.0.2")
	var v []float64
	for _, line := range strings.Split(out, "\n") {
		if _, after, ok := strings.Cut(line, "time="); ok {
			var ms float64
			if _, err := fmt.Sscan(strings.TrimSuffix(after, " ms"), &ms); err == nil {
				v = append(v, ms)
			}
		}
	}
	if len(v) == 0 {
		t.Fatalf("ping: no replies:\n%s", out)
	}
	sort.Float64s(v)
	return v[0]
}

// sockets lists the established TCP connections of netns that filter (an
// ss filter) matches, by their socket cookie.
func sockets(t *testing.T, netns, filter string) []string {
	t.Helper()
	var out []string
	for _, f := range strings.Fields(testenv.Run(t, "ip", "netns", "exec", netns, "ss", "-tnHe", "state", "established", "( "+filter+" )")) {
		if strings.HasPrefix(f, "sk:") {
			out = append(out, f)
		}
	}
	return out
}

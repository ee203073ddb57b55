package gateway_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/topology"
)

// Cluster a exports from three gateways; b's one gateway reaches each over
// a WAN link of its own.
const multiTopo = `
clusters:
  - name: a
    nodes:
      - {name: gw1, gateway: true}
      - {name: gw2, gateway: true}
      - {name: gw3, gateway: true}
      - {name: server}
  - name: b
    nodes: [{name: gw, gateway: true}, {name: client}]
wan:
  - between: [b/gw, a/gw1]
  - between: [b/gw, a/gw2]
  - between: [b/gw, a/gw3]
`

const (
	portWho   = 8090 // import "who": each exporting gateway's target names it
	portEchoM = 8091 // import "echo": one echo server behind all three
)

// TestRemoteGatewayFailover kills -9 one of the exporting cluster's three
// gateways: the importing gateway moves exactly the flows the ring gave
// it, leaves every other flow where it was, and gives them back when the
// gateway returns. A flapping gateway then leaves the placement as it was
// and echo never returns a corrupted byte.
func TestRemoteGatewayFailover(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	binary = testenv.StraitBinary(t)
	dir, err := os.MkdirTemp("", testenv.UniqueName("smg"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	l := labUp(t, "m", multiTopo)
	node := func(id string) *topology.PlanNode { return labNode(t, l, id) }
	issueFabric(t, filepath.Join(dir, "fabric")) // where newGW's configurations look
	server := node("a/server")
	echoTarget := net.JoinHostPort(server.Addr.String(), "9000")
	startIn(t, server.Netns, binary, "app", "echo", "--listen", echoTarget)

	wan := func(addr string) string { return net.JoinHostPort(addr, strconv.Itoa(wanPort)) }
	client, bgw := node("b/client"), node("b/gw")
	allowAll := policyYAML("allow-all", 1000, "allow", "")
	var exporters []*gw
	var addrs []string
	for i, name := range []string{"gw1", "gw2", "gw3"} {
		n := node("a/" + name)
		addrs = append(addrs, wan(n.Addr.String()))
		// The "who" target of this gateway serves a file naming it.
		www := filepath.Join(dir, name)
		if err := os.MkdirAll(www, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(www, "id"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		whoPort := 9001 + i
		startIn(t, server.Netns, "python3", "-m", "http.server", "--bind", server.Addr.String(), "--directory", www, strconv.Itoa(whoPort))
		res := peerYAML("b", wan(bgw.Addr.String())) + allowAll +
			exportYAML("who", net.JoinHostPort(server.Addr.String(), strconv.Itoa(whoPort))) + exportYAML("echo", echoTarget)
		exporters = append(exporters, newGW(t, dir, "a", name, n, res, ""))
	}
	peers := fmt.Sprintf("apiVersion: strait.dev/v1alpha1\nkind: Peer\nmetadata: {name: a}\nspec: {gateways: [%q, %q, %q]}\n---\n", addrs[0], addrs[1], addrs[2])
	resB := peers + allowAll + importYAML("who", bgw.Addr.String(), portWho, "a") + importYAML("echo", bgw.Addr.String(), portEchoM, "a")
	importer := newGW(t, dir, "b", "gw", bgw, resB, "probe-interval: 10ms\nprobe-misses: 20\n")
	for _, g := range exporters {
		g.start(t)
	}
	importer.start(t)
	live := func(n int) {
		t.Helper()
		var last []gateway.RemoteGateway
		for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			st, err := importer.admin().Status()
			if err != nil || len(st.Peers) != 1 || len(st.Imports) < 2 {
				continue
			}
			last = st.Peers[0].Gateways
			c := 0
			for _, r := range last {
				if r.Live {
					c++
				}
			}
			if c == n {
				return
			}
		}
		t.Fatalf("importer does not see %d live gateways of a: %+v", n, last)
	}
	live(3)
	// Each gateway's "who" server is up once it answers on the server node
	// itself; until then streams to it are refused.
	for i := range exporters {
		url := fmt.Sprintf("http://%s/id", net.JoinHostPort(server.Addr.String(), strconv.Itoa(9001+i)))
		for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
			if err := exec.Command("ip", "netns", "exec", server.Netns, "curl", "-sf", "--max-time", "2", "-o", "/dev/null", url).Run(); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("%s not answering: %v", url, err)
			}
		}
	}
	whoURL := fmt.Sprintf("http://%s/id", net.JoinHostPort(bgw.Addr.String(), strconv.Itoa(portWho)))
	for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("ip", "netns", "exec", client.Netns, "curl", "-sf", "--max-time", "2", whoURL).Output()
		if err == nil && strings.HasPrefix(string(out), "gw") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("who import not answering: %v %q", err, out)
		}
	}

	// A flow is the client's (address, port): curl binds a fixed local
	// port, so the same flow key comes back on every call. Without TIME_WAIT
	// sockets in the client's namespace the port is free again at once.
	if out, err := exec.Command("ip", "netns", "exec", client.Netns, "sysctl", "-qw", "net.ipv4.tcp_max_tw_buckets=0").CombinedOutput(); err != nil {
		t.Fatalf("sysctl: %v: %s", err, out)
	}
	const flows = 24
	who := func(port int) string {
		t.Helper()
		out, err := exec.Command("ip", "netns", "exec", client.Netns, "curl", "-sS", "--fail", "--max-time", curlMax,
			"--local-port", strconv.Itoa(port), whoURL).CombinedOutput()
		if err != nil {
			t.Fatalf("curl from port %d: %v: %s", port, err, out)
		}
		return string(out)
	}
	placement := func() map[int]string {
		m := map[int]string{}
		for i := range flows {
			m[42000+i] = who(42000 + i)
		}
		return m
	}
	before := placement()
	count := map[string]int{}
	for _, g := range before {
		count[g]++
	}
	if len(count) != 3 {
		t.Fatalf("flows on %v, want all three gateways", count)
	}

	victim := exporters[1] // gw2
	victim.proc.kill()
	live(2)
	after := placement()
	for port, g := range before {
		switch {
		case g == "gw2" && after[port] == "gw2":
			t.Errorf("flow %d still on the dead gw2", port)
		case g != "gw2" && after[port] != g:
			t.Errorf("flow %d moved from live %s to %s", port, g, after[port])
		}
	}
	victim.start(t)
	live(3)
	if back := placement(); fmt.Sprint(back) != fmt.Sprint(before) {
		t.Errorf("after gw2 returned placement is %v, want %v", back, before)
	}

	// Flapping: gw2 killed and restarted four times while echo runs.
	body := make([]byte, 64<<10)
	rand.Read(body)
	bodyFile := filepath.Join(dir, "body")
	if err := os.WriteFile(bodyFile, body, 0o644); err != nil {
		t.Fatal(err)
	}
	echoURL := fmt.Sprintf("http://%s/", net.JoinHostPort(bgw.Addr.String(), strconv.Itoa(portEchoM)))
	stop := make(chan struct{})
	type result struct{ ok, failed, corrupted int }
	res := make(chan result)
	go func() {
		var r result
		for {
			select {
			case <-stop:
				res <- r
				return
			default:
			}
			out, err := exec.Command("ip", "netns", "exec", client.Netns, "curl", "-sS", "--fail", "--max-time", curlMax,
				"-H", "Expect:", "--data-binary", "@"+bodyFile, echoURL).Output()
			switch {
			case err != nil:
				r.failed++
			case !bytes.Equal(out, body):
				r.corrupted++
			default:
				r.ok++
			}
		}
	}()
	for range 4 {
		time.Sleep(300 * time.Millisecond)
		victim.proc.kill()
		live(2)
		time.Sleep(300 * time.Millisecond)
		victim.start(t)
		live(3)
	}
	close(stop)
	r := <-res
	t.Logf("echo during flapping: %d ok, %d failed (connections on gw2 when it died), %d corrupted", r.ok, r.failed, r.corrupted)
	if r.corrupted != 0 || r.ok == 0 {
		t.Errorf("echo during flapping: %d corrupted, %d ok", r.corrupted, r.ok)
	}
	if back := placement(); fmt.Sprint(back) != fmt.Sprint(before) {
		t.Errorf("after flapping placement is %v, want %v", back, before)
	}
}

// newGW writes a gateway's resources and configuration.
func newGW(t *testing.T, dir, cluster, name string, n *topology.PlanNode, resources, extra string) *gw {
	t.Helper()
	g := &gw{t: t, cluster: cluster, netns: n.Netns, addr: n.Addr.String()}
	resFile := filepath.Join(dir, cluster+name+"-res.yaml")
	if err := os.WriteFile(resFile, []byte(resources), 0o644); err != nil {
		t.Fatal(err)
	}
	g.socket = filepath.Join(dir, cluster+name+".sock")
	g.config = filepath.Join(dir, cluster+name+".yaml")
	cfg := fmt.Sprintf("cluster: %s\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\nresources: [%s]\n%s",
		cluster, filepath.Join(dir, "fabric"), net.JoinHostPort(g.addr, strconv.Itoa(wanPort)), g.socket,
		filepath.Join(dir, cluster+name+"-state.json"), resFile, extra)
	if err := os.WriteFile(g.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/topology"
)

// The lab: cluster a runs the exporting gateway and the echo server, cluster
// b the importing gateway and the client. Every process runs in its node's
// namespace through `ip netns exec`.
const topo = `
clusters:
  - name: a
    nodes: [{name: gw, gateway: true}, {name: server}]
  - name: b
    nodes: [{name: gw, gateway: true}, {name: client}]
wan:
  - between: [a, b]
`

const (
	wanPort     = 4443
	echoPort    = 8080
	metricsAddr = "127.0.0.1:9464"
	// patience bounds waits for things that must happen (a session comes
	// up, a process exits); it is a hang detector, never a performance
	// threshold.
	patience = 20 * time.Second
	// curlMax bounds a client connection. A refused connection must end
	// with an error of its own, never with curl's timeout (exit 28).
	curlMax = "15"
)

// Import ports on the importing gateway's address, one per import.
const (
	portEcho    = 8080
	portBlocked = 8081 // denied at egress (cluster b)
	portGuarded = 8082 // denied at ingress (cluster a)
	portPrio    = 8083 // denied at ingress unless a higher-precedence allow
	portGhost   = 8084 // imported, never exported
	portLate    = 8085 // added and removed while running
	// One import of a two-port export: each port has its own server.
	portMulti1    = 8086 // the export's spec.target
	portMulti2    = 8087 // the port's own target
	portMultiNone = 8088 // in the import, not in the export
)

// proc is a process started in a namespace whose output the test reads.
type proc struct {
	cmd  *exec.Cmd
	out  *testenv.Output
	done chan struct{}
	err  error
}

// startIn starts argv in the namespace netns; it is killed when t ends
// unless it ended before.
func startIn(t *testing.T, netns string, argv ...string) *proc {
	t.Helper()
	return startOwned(t, t, netns, argv...)
}

// startOwned is startIn for a process that outlives the (sub)test t that
// starts it: it is killed when owner ends.
func startOwned(t, owner *testing.T, netns string, argv ...string) *proc {
	t.Helper()
	p := &proc{out: &testenv.Output{}, done: make(chan struct{})}
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", netns}, argv...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.WaitDelay = testenv.KilledOutputWait
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %v in %s: %v", argv, netns, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	owner.Cleanup(func() {
		p.kill()
		if owner.Failed() {
			owner.Logf("output of %v in %s:\n%s", argv, netns, p.out.String())
		}
	})
	return p
}

// kill ends the process with SIGKILL and waits for it. `ip netns exec`
// execs the command, so the signal reaches it and not a wrapper.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// gw is one gateway process and what the test needs to reach it.
type gw struct {
	t       *testing.T // owner of the process, which may outlive subtests
	cluster string
	netns   string
	addr    string // node address
	config  string
	socket  string
	proc    *proc
}

func (g *gw) start(t *testing.T) {
	t.Helper()
	g.proc = startOwned(t, g.t, g.netns, binary, "gateway", "--config", g.config)
}

// restart kills the gateway (SIGKILL, nothing flushed) and starts it again
// with the same configuration.
func (g *gw) restart(t *testing.T) {
	t.Helper()
	log := g.proc.out.String()
	g.proc.kill()
	g.t.Cleanup(func() {
		if g.t.Failed() {
			g.t.Logf("log of %s before restart:\n%s", g.cluster, log)
		}
	})
	g.start(t)
}

func (g *gw) admin() *gateway.AdminClient { return gateway.NewAdminClient(g.socket) }

// straitCLI runs a strait subcommand against the gateway's admin socket.
func (g *gw) straitCLI(args ...string) (string, error) {
	cmd := exec.Command(binary, append(args, "--gateway", g.socket)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (g *gw) apply(t *testing.T, yaml string) {
	t.Helper()
	f := writeTemp(t, "apply-*.yaml", yaml)
	if out, err := g.straitCLI("apply", "-f", f); err != nil {
		t.Fatalf("strait apply on %s: %v\n%s", g.cluster, err, out)
	}
}

func (g *gw) delete(t *testing.T, yaml string) {
	t.Helper()
	f := writeTemp(t, "delete-*.yaml", yaml)
	if out, err := g.straitCLI("delete", "-f", f); err != nil {
		t.Fatalf("strait delete on %s: %v\n%s", g.cluster, err, out)
	}
}

// metrics scrapes the gateway's /metrics from inside its namespace.
func (g *gw) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", g.netns, "curl", "-sS", "--max-time", "5", "http://"+metricsAddr+"/metrics").Output()
	if err != nil {
		t.Fatalf("scrape metrics of %s: %v", g.cluster, err)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics of %s: bad line %q", g.cluster, line)
		}
		m[line[:i]] = v
	}
	return m
}

func (g *gw) metric(t *testing.T, name string) float64 {
	t.Helper()
	return g.metrics(t)[name]
}

// waitMetric polls until cond holds for the named metric.
func (g *gw) waitMetric(t *testing.T, name string, cond func(float64) bool, what string) {
	t.Helper()
	var v float64
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if v = g.metric(t, name); cond(v) {
			return
		}
	}
	t.Fatalf("%s on %s: %s = %v after %v", what, g.cluster, name, v, patience)
}

// waitLive waits until the gateway has a live session to peer and listens
// on n import addresses (TCP and UDP).
func (g *gw) waitLive(t *testing.T, peer string, imports int) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-g.proc.done:
			t.Fatalf("gateway %s exited: %v\n%s", g.cluster, g.proc.err, g.proc.out.String())
		default:
		}
		st, err := g.admin().Status()
		if err != nil {
			last = err.Error()
			continue
		}
		if len(st.Imports)+len(st.UDPImports) < imports {
			last = fmt.Sprintf("imports %v, UDP %v", st.Imports, st.UDPImports)
			continue
		}
		for _, p := range st.Peers {
			if p.Cluster == peer && len(p.Live) > 0 {
				return
			}
		}
		last = fmt.Sprintf("peers %+v", st.Peers)
	}
	t.Fatalf("gateway %s not ready after %v: %s", g.cluster, patience, last)
}

var (
	binary string
	tmpDir string
)

func TestMain(m *testing.M) { testenv.Main(m) }

func writeTemp(t *testing.T, pattern, content string) string {
	t.Helper()
	f, err := os.CreateTemp(tmpDir, pattern)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func peerYAML(name, addr string) string {
	return fmt.Sprintf("apiVersion: strait.dev/v1alpha1\nkind: Peer\nmetadata: {name: %s}\nspec: {gateways: [\"%s\"]}\n---\n", name, addr)
}

func exportYAML(name, target string) string {
	return fmt.Sprintf("apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: %s, namespace: default}\nspec: {target: \"%s\"}\n---\n", name, target)
}

func importYAML(name, ip string, port int, cluster string) string {
	return fmt.Sprintf(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: %s, namespace: default}
spec:
  type: ClusterSetIP
  ips: [%s]
  ports: [{name: http, protocol: TCP, port: %d}]
  clusters: [{cluster: %s}]
---
`, name, ip, port, cluster)
}

func policyYAML(name string, priority int, action, spec string) string {
	return fmt.Sprintf("apiVersion: strait.dev/v1alpha1\nkind: AccessPolicy\nmetadata: {name: %s}\nspec:\n  priority: %d\n  action: %s\n%s---\n", name, priority, action, spec)
}

// env is the running two-cluster lab.
type env struct {
	lab            *lab.Lab
	a, b           *gw
	client, server string // namespaces
	clientAddr     string
	fabric         string
	target         string // the echo server
	echo           *proc
	t              *testing.T // of the whole lab, for processes that outlive a subtest
}

// url is the address of an import on cluster b's gateway.
func (e *env) url(port int) string {
	return fmt.Sprintf("http://%s/", net.JoinHostPort(e.b.addr, strconv.Itoa(port)))
}

// curl runs curl on the client node and returns its output and exit code.
func (e *env) curl(t *testing.T, args ...string) (string, int) {
	t.Helper()
	argv := append([]string{"netns", "exec", e.client, "curl", "-sS", "--max-time", curlMax, "-H", "Expect:"}, args...)
	out, err := exec.Command("ip", argv...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("curl: %v", err)
	return "", -1
}

// mustEcho posts body to the import on port and checks the reply.
func (e *env) mustEcho(t *testing.T, port int, body string) {
	t.Helper()
	out, code := e.curl(t, "--fail", "--data-binary", body, e.url(port))
	if code != 0 || out != body {
		t.Fatalf("echo through import port %d: exit %d, reply %q, want %q", port, code, out, body)
	}
}

// mustRefuse checks that a connection to the import on port ends in an
// error of its own: a reset or an empty reply, not curl's timeout.
func (e *env) mustRefuse(t *testing.T, port int) string {
	t.Helper()
	out, code := e.curl(t, "--data-binary", "hello", e.url(port))
	switch code {
	case 0:
		t.Fatalf("import port %d answered %q, want the connection refused", port, out)
	case 28:
		t.Fatalf("import port %d: curl timed out (%s), want a fast failure", port, strings.TrimSpace(out))
	// A reset that arrives before curl checked its connect is reported as
	// a failed connect (7); callers tell it from a closed port by the
	// gateway's counters.
	case 7, 52, 55, 56: // reset at connect; empty reply; send or recv failure
	default:
		t.Errorf("import port %d: curl exit %d (%s), want 7, 52, 55 or 56", port, code, strings.TrimSpace(out))
	}
	return out
}

// labUp brings up topoYAML (a topology without its name) under a unique
// name starting with prefix, and takes it down in t.Cleanup.
func labUp(t *testing.T, prefix, topoYAML string) *lab.Lab {
	t.Helper()
	tp, err := topology.Parse([]byte("name: " + testenv.UniqueName(prefix) + "\n" + topoYAML))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := tp.Plan()
	if err != nil {
		t.Fatal(err)
	}
	opts := lab.Options{Binary: binary, StateDir: t.TempDir()}
	l, err := lab.Up(context.Background(), plan, opts)
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Down(context.Background(), plan.Name, opts); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	return l
}

// labNode returns node id of l or fails the test.
func labNode(t *testing.T, l *lab.Lab, id string) *topology.PlanNode {
	t.Helper()
	n, err := l.Node(id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// issueFabric creates the clusterset's CA in dir and identities for
// clusters a and b.
func issueFabric(t *testing.T, dir string) {
	t.Helper()
	for _, args := range [][]string{
		{"fabric", "init", "--dir", dir, "--clusterset", "cs"},
		{"fabric", "issue", "a", "--dir", dir},
		{"fabric", "issue", "b", "--dir", dir},
	} {
		if out, err := exec.Command(binary, args...).CombinedOutput(); err != nil {
			t.Fatalf("strait %v: %v\n%s", args, err, out)
		}
	}
}

func setup(t *testing.T) *env {
	testenv.RequireRoot(t)
	for _, tool := range []string{"curl", "dig"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	binary = testenv.StraitBinary(t)
	var err error
	// Short: unix socket paths must fit in 108 bytes.
	if tmpDir, err = os.MkdirTemp("", testenv.UniqueName("sgw")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmpDir) })

	l := labUp(t, "g", topo)
	node := func(id string) *topology.PlanNode { return labNode(t, l, id) }
	e := &env{t: t, lab: l, client: node("b/client").Netns, server: node("a/server").Netns, clientAddr: node("b/client").Addr.String()}

	e.fabric = filepath.Join(tmpDir, "fabric")
	issueFabric(t, e.fabric)

	serverAddr := node("a/server").Addr.String()
	target := net.JoinHostPort(serverAddr, strconv.Itoa(echoPort))
	e.target = target
	e.startEcho(t)

	e.a = &gw{t: t, cluster: "a", netns: node("a/gw").Netns, addr: node("a/gw").Addr.String()}
	e.b = &gw{t: t, cluster: "b", netns: node("b/gw").Netns, addr: node("b/gw").Addr.String()}
	wan := func(g *gw) string { return net.JoinHostPort(g.addr, strconv.Itoa(wanPort)) }

	// Both clusters allow everything at the lowest precedence; the
	// policies above it are what the subtests exercise.
	allowAll := policyYAML("allow-all", 1000, "allow", "")
	resA := peerYAML("b", wan(e.b)) + allowAll
	for _, name := range []string{"echo", "blocked", "guarded", "prio"} {
		resA += exportYAML(name, target)
	}
	resA += policyYAML("deny-guarded", 10, "deny", "  from: {clusters: [b], namespaces: [web]}\n  to: {exports: [guarded]}\n")
	resA += policyYAML("deny-prio", 20, "deny", "  to: {exports: [prio]}\n")
	resB := peerYAML("a", wan(e.a)) + allowAll
	for name, port := range map[string]int{"echo": portEcho, "blocked": portBlocked, "guarded": portGuarded, "prio": portPrio, "ghost": portGhost} {
		resB += importYAML(name, e.b.addr, port, "a")
	}
	resB += policyYAML("deny-blocked", 10, "deny", "  from: {namespaces: [web]}\n  to: {exports: [blocked]}\n")

	for _, g := range []*gw{e.a, e.b} {
		res := resA
		extra := ""
		if g == e.b {
			res = resB
			// The client is workload app=web in namespace web; DNS
			// serves the imports.
			extra = fmt.Sprintf("dns: %s\nsources:\n  - {cidr: %s/32, namespace: web, labels: {app: web}}\n",
				net.JoinHostPort(g.addr, "53"), e.clientAddr)
		}
		resFile := filepath.Join(tmpDir, g.cluster+"-resources.yaml")
		if err := os.WriteFile(resFile, []byte(res), 0o644); err != nil {
			t.Fatal(err)
		}
		g.socket = filepath.Join(tmpDir, g.cluster+".sock")
		g.config = filepath.Join(tmpDir, g.cluster+"-gateway.yaml")
		cfg := fmt.Sprintf("cluster: %s\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\nmetrics: %s\nresources: [%s]\n%s",
			g.cluster, e.fabric, wan(g), g.socket, filepath.Join(tmpDir, g.cluster+"-state.json"), metricsAddr, resFile, extra)
		if err := os.WriteFile(g.config, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		g.start(t)
	}
	e.b.waitLive(t, "a", 5)
	e.a.waitLive(t, "b", 0)
	return e
}

// startEcho starts the export's target and waits until it listens.
func (e *env) startEcho(t *testing.T) {
	t.Helper()
	e.echo = startOwned(t, e.t, e.server, binary, "app", "echo", "--listen", e.target)
	for deadline := time.Now().Add(patience); !strings.Contains(e.echo.out.String(), "listening"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("echo server did not start: %s", e.echo.out.String())
		}
	}
}

// testTargetRestarts stops the export's target: streams are refused with
// the reason, and once it is back the first connection works although the
// exporting gateway held warm connections to the old process.
func testTargetRestarts(t *testing.T, e *env) {
	const refused = "strait_streams_refused_total"
	e.echo.kill()
	before := e.a.metric(t, refused)
	e.mustRefuse(t, portEcho)
	if got := e.a.metric(t, refused) - before; got != 1 {
		t.Errorf("streams refused on a went up by %v, want 1", got)
	}
	// The gateway may log after the client saw the refusal: wait for it.
	want := "export target " + e.target + " unreachable"
	for deadline := time.Now().Add(patience); !strings.Contains(e.a.proc.out.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("a's log does not say the target is unreachable (%q)", want)
			break
		}
	}
	e.startEcho(t)
	e.mustEcho(t, portEcho, "first after target restart")
}

// TestTwoClusters runs both gateways, the echo server and the clients as
// processes in a two-cluster lab and goes through the data plane's
// behaviours one subtest at a time. The subtests share the lab (building
// it is the expensive part) and run in order: the last ones kill gateways.
func TestTwoClusters(t *testing.T) {
	e := setup(t)
	steps := []struct {
		name string
		f    func(*testing.T, *env)
	}{
		{"EchoIntegrity", testEchoIntegrity},
		{"KeepAliveAndNewConnections", testKeepAlive},
		{"StreamBytesMatchAcrossGateways", testStreamBytes},
		{"Wrk", testWrk},
		{"Iperf3", testIperf3},
		{"CertificateRotation", testRotation},
		{"DNS", testDNS},
		{"PolicyEgressDeny", testEgressDeny},
		{"PolicyIngressDeny", testIngressDeny},
		{"PolicyPriority", testPolicyPriority},
		{"UnknownExport", testUnknownExport},
		{"MultiPortExport", testMultiPort},
		{"BadAdminInput", testBadAdminInput},
		{"ImportAddressNotLocal", testImportNotLocal},
		{"IdentityOtherCA", testOtherCA},
		{"IdentityWrongCluster", testWrongCluster},
		{"ExportTargetRestarts", testTargetRestarts},
		{"ImportSurvivesFDExhaustion", testFDExhaustion},
		{"StalledHost", testStalledHost},
		{"UnpacedForLossyRequests", testUnpacedForLossyRequests},
		{"LANSocketsOnStraitCongestion", testLANCongestion},
		{"BBROnlyForLossyBulk", testBBROnlyForLossyBulk},
		{"WANPartition", testPartition},
		{"LiveChangesAndRestart", testLiveChanges},
		{"PeerGatewayDies", testPeerDies},
		{"GracefulStop", testGracefulStop},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.f(t, e) }) {
			// Later steps assume the state earlier ones leave; a
			// failure would cascade.
			break
		}
	}
}

func testEchoIntegrity(t *testing.T, e *env) {
	for _, size := range []int{60, 1 << 20, 10 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			body := make([]byte, size)
			_, _ = rand.Read(body)
			in := filepath.Join(tmpDir, "in-"+strconv.Itoa(size))
			out := filepath.Join(tmpDir, "out-"+strconv.Itoa(size))
			if err := os.WriteFile(in, body, 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(in)
			defer os.Remove(out)
			msg, code := e.curl(t, "--fail", "--data-binary", "@"+in, "-o", out, e.url(portEcho))
			if code != 0 {
				t.Fatalf("curl exit %d: %s", code, msg)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(got) != sha256.Sum256(body) {
				t.Fatalf("echo of %d bytes came back as %d bytes with another sha256", size, len(got))
			}
		})
	}
}

func testKeepAlive(t *testing.T, e *env) {
	const conns = "strait_client_connections_total"
	before := e.b.metric(t, conns)
	// One curl, three requests: one connection, reused.
	u := e.url(portEcho)
	out, code := e.curl(t, "--fail", "--data-binary", "x", "-w", " %{num_connects}\n", u, u, u)
	if code != 0 {
		t.Fatalf("curl exit %d: %s", code, out)
	}
	if want := "x 1\nx 0\nx 0\n"; out != want {
		t.Errorf("keep-alive: replies and connects %q, want %q", out, want)
	}
	if got := e.b.metric(t, conns) - before; got != 1 {
		t.Errorf("keep-alive: %v client connections, want 1", got)
	}
	// Three curls: three connections.
	before = e.b.metric(t, conns)
	for i := range 3 {
		e.mustEcho(t, portEcho, "new"+strconv.Itoa(i))
	}
	if got := e.b.metric(t, conns) - before; got != 3 {
		t.Errorf("new connections: %v client connections, want 3", got)
	}
}

// testStreamBytes checks the byte counters of both ends of the same
// streams: what the importing gateway sent toward cluster a is what the
// exporting gateway received from cluster b, and the reverse. The echo's
// reply differs from the request in size (headers), so swapped directions
// show.
func testStreamBytes(t *testing.T, e *env) {
	e.mustEcho(t, portEcho, strings.Repeat("z", 5000))
	const (
		openB = `strait_streams_open{point="egress"}`
		openA = `strait_streams_open{point="ingress"}`
	)
	e.b.waitMetric(t, openB, func(v float64) bool { return v == 0 }, "streams end")
	e.a.waitMetric(t, openA, func(v float64) bool { return v == 0 }, "streams end")
	mb, ma := e.b.metrics(t), e.a.metrics(t)
	for _, dir := range [][2]string{{"out", "in"}, {"in", "out"}} {
		// Prometheus's text format orders labels by name.
		b := mb[`strait_stream_bytes_total{direction="`+dir[0]+`",point="egress"}`]
		a := ma[`strait_stream_bytes_total{direction="`+dir[1]+`",point="ingress"}`]
		if a != b || a == 0 {
			t.Errorf("importing gateway counted %v bytes %s, exporting gateway %v bytes %s; want equal", b, dir[0], a, dir[1])
		}
	}
	// Connections to the target are preconnected: with one client at a
	// time, streams find warm ones.
	if ma[`strait_target_dials_total{kind="warm"}`] == 0 {
		t.Errorf("no warm target dials on a: %v cold", ma[`strait_target_dials_total{kind="cold"}`])
	}
	if mb[`strait_streams_total{point="egress"}`] != ma[`strait_streams_total{point="ingress"}`] {
		t.Errorf("streams: %v at egress, %v at ingress", mb[`strait_streams_total{point="egress"}`], ma[`strait_streams_total{point="ingress"}`])
	}
}

func testDNS(t *testing.T, e *env) {
	tests := []struct {
		name, qtype, qname string
		status             string
		answer             string // +short output
	}{
		{"A", "A", "echo.default.svc.clusterset.local", "NOERROR", e.b.addr},
		{"SRV", "SRV", "_http._tcp.echo.default.svc.clusterset.local", "NOERROR", fmt.Sprintf("10 100 %d echo.default.svc.clusterset.local.", portEcho)},
		{"TXT", "TXT", "dns-version.clusterset.local", "NOERROR", `"1.0.0"`},
		{"unknown", "A", "nope.default.svc.clusterset.local", "NXDOMAIN", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, answer := dig(t, e, tt.qtype, tt.qname)
			if status != tt.status || answer != tt.answer {
				t.Errorf("dig %s %s: status %s, answer %q; want %s, %q", tt.qtype, tt.qname, status, answer, tt.status, tt.answer)
			}
		})
	}
}

// dig asks cluster b's gateway from the client node and returns the
// response status and the answer section, one record data per line.
func dig(t *testing.T, e *env, qtype, qname string) (status, answer string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", e.client, "dig", "@"+e.b.addr, "-p", "53",
		"+time=2", "+tries=3", "+noall", "+comments", "+answer", qtype, qname).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %s %s: %v\n%s", qtype, qname, err, out)
	}
	var data []string
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "status: "); i >= 0 {
			status = strings.TrimSuffix(strings.Fields(line[i+len("status: "):])[0], ",")
			continue
		}
		if line == "" || strings.HasPrefix(line, ";") {
			continue
		}
		f := strings.Fields(line)
		if len(f) >= 5 {
			data = append(data, strings.Join(f[4:], " "))
		}
	}
	return status, strings.Join(data, "\n")
}

func testEgressDeny(t *testing.T, e *env) {
	const denials = `strait_policy_denials_total{point="egress"}`
	beforeB, beforeA := e.b.metric(t, denials), e.a.metric(t, `strait_policy_denials_total{point="ingress"}`)
	streamsA := e.a.metric(t, `strait_streams_total{point="ingress"}`)
	conns := e.b.metric(t, "strait_client_connections_total")
	e.mustRefuse(t, portBlocked)
	if got := e.b.metric(t, "strait_client_connections_total") - conns; got != 1 {
		t.Errorf("b accepted %v client connections, want 1 (accepted, then reset)", got)
	}
	if got := e.b.metric(t, denials) - beforeB; got != 1 {
		t.Errorf("egress denials on b went up by %v, want 1", got)
	}
	// Denied at egress, the connection never crossed the WAN.
	if got := e.a.metric(t, `strait_policy_denials_total{point="ingress"}`) - beforeA; got != 0 {
		t.Errorf("ingress denials on a went up by %v, want 0", got)
	}
	if got := e.a.metric(t, `strait_streams_total{point="ingress"}`) - streamsA; got != 0 {
		t.Errorf("a accepted %v streams for a connection denied at egress", got)
	}
	if !strings.Contains(e.b.proc.out.String(), "deny-blocked") {
		t.Errorf("b's log does not name the deciding policy deny-blocked")
	}
}

func testIngressDeny(t *testing.T, e *env) {
	const denials = `strait_policy_denials_total{point="ingress"}`
	before, beforeB := e.a.metric(t, denials), e.b.metric(t, `strait_policy_denials_total{point="egress"}`)
	e.mustRefuse(t, portGuarded)
	// The egress side counts its stream as ended only after the reset came
	// back; the ingress counter is updated before the reset is sent.
	if got := e.a.metric(t, denials) - before; got != 1 {
		t.Errorf("ingress denials on a went up by %v, want 1", got)
	}
	if got := e.b.metric(t, `strait_policy_denials_total{point="egress"}`) - beforeB; got != 0 {
		t.Errorf("egress denials on b went up by %v, want 0", got)
	}
	if log := e.a.proc.out.String(); !strings.Contains(log, "denied by policy deny-guarded") {
		t.Errorf("a's log does not give the reason (denied by policy deny-guarded):\n%s", log)
	}
}

func testPolicyPriority(t *testing.T, e *env) {
	const denials = `strait_policy_denials_total{point="ingress"}`
	// deny-prio (priority 20) is on a from the start.
	tests := []struct {
		name   string
		allow  string // an allow policy for prio applied first ("" none)
		passes bool
	}{
		{"deny alone", "", false},
		{"allow at equal priority loses", policyYAML("allow-prio", 20, "allow", "  from: {clusters: [b]}\n  to: {exports: [prio]}\n"), false},
		{"allow at higher precedence wins", policyYAML("allow-prio", 5, "allow", "  from: {clusters: [b]}\n  to: {exports: [prio]}\n"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.allow != "" {
				e.a.apply(t, tt.allow)
			}
			before := e.a.metric(t, denials)
			if tt.passes {
				e.mustEcho(t, portPrio, "prio")
			} else {
				e.mustRefuse(t, portPrio)
			}
			want := 1.0
			if tt.passes {
				want = 0
			}
			if got := e.a.metric(t, denials) - before; got != want {
				t.Errorf("ingress denials went up by %v, want %v", got, want)
			}
		})
	}
	e.a.delete(t, policyYAML("allow-prio", 5, "allow", "  to: {exports: [prio]}\n"))
	e.mustRefuse(t, portPrio)
}

func testUnknownExport(t *testing.T, e *env) {
	const refused = "strait_streams_refused_total"
	before := e.a.metric(t, refused)
	e.mustRefuse(t, portGhost)
	if got := e.a.metric(t, refused) - before; got != 1 {
		t.Errorf("streams refused on a went up by %v, want 1", got)
	}
	if log := e.a.proc.out.String(); !strings.Contains(log, "unknown export default/ghost") {
		t.Errorf("a's log does not give the reason (unknown export default/ghost)")
	}
}

// testMultiPort: one export with two ports served by two processes, each
// naming itself, is reached through one import at clusterset-IP:port1 and
// :port2, each port on its own server (before multi-port exports, both went
// to spec.target); the exporting gateway keeps warm connections to both;
// an import port the export does not have is refused with the reason, not
// carried to another port's server.
func testMultiPort(t *testing.T, e *env) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("needs python3 for the file servers")
	}
	host, _, _ := net.SplitHostPort(e.target)
	names := []string{"first", "second"}
	var targets []string
	for i, name := range names {
		www := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(www, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(www, "id"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		port := strconv.Itoa(9101 + i)
		startIn(t, e.server, "python3", "-m", "http.server", "--bind", host, "--directory", www, port)
		targets = append(targets, net.JoinHostPort(host, port))
	}
	for _, tg := range targets {
		url := "http://" + tg + "/id"
		for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
			if err := exec.Command("ip", "netns", "exec", e.server, "curl", "-sf", "--max-time", "2", "-o", "/dev/null", url).Run(); err == nil {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("%s not answering: %v", url, err)
			}
		}
	}
	export := fmt.Sprintf(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: multi, namespace: default}
spec:
  target: "%s"
  ports:
  - {name: first, port: %d}
  - {name: second, port: %d, target: "%s"}
---
`, targets[0], portMulti1, portMulti2, targets[1])
	imp := fmt.Sprintf(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: multi, namespace: default}
spec:
  type: ClusterSetIP
  ips: [%s]
  ports: [{name: first, port: %d}, {name: second, port: %d}, {name: none, port: %d}]
  clusters: [{cluster: a}]
---
`, e.b.addr, portMulti1, portMulti2, portMultiNone)
	e.a.apply(t, export)
	e.b.apply(t, imp)
	t.Cleanup(func() {
		e.b.delete(t, imp)
		e.a.delete(t, export)
	})

	// Warm connections per target: the second port's server gets its own.
	for _, tg := range targets {
		h, p, _ := net.SplitHostPort(tg)
		for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
			out, err := exec.Command("ip", "netns", "exec", e.a.netns, "ss", "-tnH", "state", "established", "dst", h, "dport", "= :"+p).CombinedOutput()
			if err != nil {
				t.Fatalf("ss: %v: %s", err, out)
			}
			if strings.TrimSpace(string(out)) != "" {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("gateway a holds no connection to target %s after %v", tg, patience)
			}
		}
	}
	// Each port twice, alternating: a port must not stick to the server
	// the previous connection reached.
	for _, i := range []int{1, 0, 1, 0} {
		port := []int{portMulti1, portMulti2}[i]
		u := fmt.Sprintf("http://%s/id", net.JoinHostPort(e.b.addr, strconv.Itoa(port)))
		if out, code := e.curl(t, "--fail", u); code != 0 || out != names[i] {
			t.Errorf("curl %s: exit %d, %q; want the %q server", u, code, out, names[i])
		}
	}

	const refused = "strait_streams_refused_total"
	before := e.a.metric(t, refused)
	e.mustRefuse(t, portMultiNone)
	if got := e.a.metric(t, refused) - before; got != 1 {
		t.Errorf("streams refused on a went up by %v, want 1", got)
	}
	if want := fmt.Sprintf("export default/multi has no TCP port %d", portMultiNone); !strings.Contains(e.a.proc.out.String(), want) {
		t.Errorf("a's log does not give the reason (%s)", want)
	}
	// b logs the reset once its splice ends, which may be after curl's.
	want := fmt.Sprintf("no TCP port %d", portMultiNone)
	for deadline := time.Now().Add(patience); !strings.Contains(e.b.proc.out.String(), want); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b's log does not give the exporting gateway's reason (%s)", want)
		}
	}
}

func testBadAdminInput(t *testing.T, e *env) {
	tests := []struct {
		name string
		yaml string
		want []string // in strait's error output
	}{
		{"syntax", "apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\nmetadata: {name: x\n", []string{"document 1"}},
		{"unknown field", importYAML("x", e.b.addr, 9000, "a") + "apiVersion: strait.dev/v1alpha1\nkind: Peer\nmetadata: {name: z}\nspec: {gatways: [\"1.2.3.4:1\"]}\n",
			[]string{"document 2 (Peer z)", "spec.gatways: unknown field"}},
		{"bad value", policyYAML("p", 5, "permit", ""), []string{`spec.action: "permit" is not one of allow, deny`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := e.b.straitCLI("get")
			if err != nil {
				t.Fatalf("strait get: %v\n%s", err, before)
			}
			st, err := e.b.admin().Status()
			if err != nil {
				t.Fatal(err)
			}
			out, err := e.b.straitCLI("apply", "-f", writeTemp(t, "bad-*.yaml", tt.yaml))
			if err == nil {
				t.Fatalf("strait apply of bad YAML succeeded: %s", out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("error %q does not contain %q", strings.TrimSpace(out), w)
				}
			}
			after, err := e.b.straitCLI("get")
			if err != nil || after != before {
				t.Errorf("resources changed by a failed apply (err %v):\nbefore\n%s\nafter\n%s", err, before, after)
			}
			if st2, err := e.b.admin().Status(); err != nil || st2.Revision != st.Revision {
				t.Errorf("revision %d → %+v, %v", st.Revision, st2, err)
			}
			e.mustEcho(t, portEcho, "still serving")
		})
	}
}

// testOtherCA runs a second gateway of cluster b whose certificate comes
// from another CA (same clusterset name): it must never get a session to a,
// and both ends that verify a certificate count the rejection.
// testImportNotLocal applies an import on an address the gateway's node
// does not have: it is stored, and the CLI says it is not in effect.
func testImportNotLocal(t *testing.T, e *env) {
	imp := importYAML("faraway", "192.0.2.1", 80, "a")
	out, err := e.b.straitCLI("apply", "-f", writeTemp(t, "faraway-*.yaml", imp))
	if err == nil || !strings.Contains(out, "stored, but not all in effect") || !strings.Contains(out, "import default/faraway") {
		t.Errorf("strait apply of an import on a foreign address: %v\n%s", err, out)
	}
	if got, err := e.b.straitCLI("get", "ServiceImport"); err != nil || !strings.Contains(got, "name: faraway") {
		t.Errorf("import not stored: %v\n%s", err, got)
	}
	e.b.delete(t, imp)
	e.mustEcho(t, portEcho, "after faraway")
}

func testOtherCA(t *testing.T, e *env) {
	other := filepath.Join(tmpDir, "other-fabric")
	for _, args := range [][]string{
		{"fabric", "init", "--dir", other, "--clusterset", "cs"},
		{"fabric", "issue", "b", "--dir", other},
	} {
		if out, err := exec.Command(binary, args...).CombinedOutput(); err != nil {
			t.Fatalf("strait %v: %v\n%s", args, err, out)
		}
	}
	res := writeTemp(t, "rogue-*.yaml", peerYAML("a", net.JoinHostPort(e.a.addr, strconv.Itoa(wanPort))))
	rogue := &gw{t: t, cluster: "b (other CA)", netns: e.b.netns, addr: e.b.addr,
		socket: filepath.Join(tmpDir, "rogue.sock"), config: filepath.Join(tmpDir, "rogue.yaml")}
	cfg := fmt.Sprintf("cluster: b\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\nmetrics: 127.0.0.1:9465\nresources: [%s]\n",
		other, net.JoinHostPort(e.b.addr, "4444"), rogue.socket, filepath.Join(tmpDir, "rogue-state.json"), res)
	if err := os.WriteFile(rogue.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	rogue.start(t)
	acceptedA := e.a.metric(t, "strait_sessions_accepted_total")

	// The dialer verifies the server first (TLS 1.3): the rogue rejects a.
	scrape := func() float64 {
		out, err := exec.Command("ip", "netns", "exec", e.b.netns, "curl", "-sS", "http://127.0.0.1:9465/metrics").Output()
		if err != nil {
			return -1
		}
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(line, `strait_handshake_failures_total{reason="unknown_ca"} `); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
		return 0
	}
	var n float64
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n = scrape(); n > 0 {
			break
		}
	}
	if n <= 0 {
		t.Fatalf("gateway with a foreign CA counted %v unknown_ca rejections", n)
	}
	st, err := rogue.admin().Status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Peers) != 1 || len(st.Peers[0].Live) != 0 {
		t.Errorf("gateway with a foreign CA: peers %+v, want a without live sessions", st.Peers)
	}
	if got := e.a.metric(t, "strait_sessions_accepted_total") - acceptedA; got != 0 {
		t.Errorf("a accepted %v sessions during the foreign gateway's attempts", got)
	}
	rogue.proc.kill()

	// The server's own check: a client certificate from the other CA
	// (curl, no ALPN, not verifying the server) is rejected and counted by a.
	const reason = `strait_handshake_failures_total{reason="unknown_ca"}`
	before := e.a.metric(t, reason)
	out, err := exec.Command("ip", "netns", "exec", e.b.netns, "curl", "-sS", "--max-time", curlMax, "-k", "--no-alpn",
		"--cert", filepath.Join(other, "b.crt"), "--key", filepath.Join(other, "b.key"),
		"https://"+net.JoinHostPort(e.a.addr, strconv.Itoa(wanPort))+"/").CombinedOutput()
	if err == nil {
		t.Errorf("TLS client with a foreign certificate got through: %s", out)
	}
	e.a.waitMetric(t, reason, func(v float64) bool { return v == before+1 }, "server-side rejection of a foreign certificate")
	e.mustEcho(t, portEcho, "after foreign ca")
}

// testWrongCluster points a Peer named d at cluster a's gateway: a presents
// a valid certificate of the clusterset, but for cluster a, so b must not
// take the session, and counts wrong_cluster.
func testWrongCluster(t *testing.T, e *env) {
	const reason = `strait_handshake_failures_total{reason="wrong_cluster"}`
	before := e.b.metric(t, reason)
	peer := peerYAML("d", net.JoinHostPort(e.a.addr, strconv.Itoa(wanPort)))
	e.b.apply(t, peer)
	e.b.waitMetric(t, reason, func(v float64) bool { return v > before }, "wrong cluster rejected")
	st, err := e.b.admin().Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Peers {
		if p.Cluster == "d" && len(p.Live) != 0 {
			t.Errorf("peer d (answered by cluster a) has live sessions %v", p.Live)
		}
	}
	e.b.delete(t, peer)
	e.mustEcho(t, portEcho, "after wrong cluster")
}

func testLiveChanges(t *testing.T, e *env) {
	// The import prefers cluster zz, which b has no Peer for: connections
	// go to the next cluster, a.
	imp := strings.Replace(importYAML("late", e.b.addr, portLate, "a"), "clusters: [{cluster: a}]", "clusters: [{cluster: zz}, {cluster: a}]", 1)
	e.mustRefuseConnect(t, portLate)
	e.a.apply(t, exportYAML("late", e.target))
	e.b.apply(t, imp)
	e.mustEcho(t, portLate, "late")
	out, err := e.b.straitCLI("gateway", "status")
	if err != nil {
		t.Fatalf("strait gateway status: %v\n%s", err, out)
	}
	var st gateway.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("strait gateway status: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("default/late %s:%d", e.b.addr, portLate); !slices.Contains(st.Imports, want) || st.Cluster != "b" ||
		len(st.Peers) != 1 || st.Peers[0].Cluster != "a" || len(st.Peers[0].Live) == 0 {
		t.Errorf("strait gateway status: %s\nwant import %q and a live session to a", out, want)
	}
	if _, answer := dig(t, e, "A", "late.default.svc.clusterset.local"); answer != e.b.addr {
		t.Errorf("dig late: %q, want %s", answer, e.b.addr)
	}
	if out, err := e.b.straitCLI("get", "ServiceImport"); err != nil || !strings.Contains(out, "name: late") {
		t.Errorf("strait get ServiceImport: %v\n%s", err, out)
	}

	// Kill -9 and start again with the same configuration: the applied
	// import comes back from the state file.
	e.b.restart(t)
	e.b.waitLive(t, "a", 6)
	e.mustEcho(t, portLate, "late after restart")
	e.mustEcho(t, portEcho, "echo after restart")

	e.b.delete(t, imp)
	e.mustRefuseConnect(t, portLate)
	if status, _ := dig(t, e, "A", "late.default.svc.clusterset.local"); status != "NXDOMAIN" {
		t.Errorf("dig late after delete: %s, want NXDOMAIN", status)
	}
	e.mustEcho(t, portEcho, "echo after delete")
}

// clientConns counts the client node's established connections to the
// import port.
func (e *env) clientConns(t *testing.T, port int) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", e.client, "ss", "-tnH", "state", "established",
		"dst", e.b.addr, "dport", "= :"+strconv.Itoa(port)).CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v: %s", err, out)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// mustRefuseConnect checks that nothing listens on the import port.
func (e *env) mustRefuseConnect(t *testing.T, port int) {
	t.Helper()
	conns := e.b.metric(t, "strait_client_connections_total")
	out, code := e.curl(t, e.url(port))
	if code != 7 {
		t.Fatalf("import port %d: curl exit %d (%s), want 7 (connection refused)", port, code, strings.TrimSpace(out))
	}
	if got := e.b.metric(t, "strait_client_connections_total") - conns; got != 0 {
		t.Errorf("import port %d: b accepted %v connections, want none", port, got)
	}
}

// openUpload starts a client connection in the middle of a request:
// curl uploads from a pipe the test holds open. It returns once the
// importing gateway carries its stream; send writes more of the upload and
// ends it, and returns curl's exit.
func (e *env) openUpload(t *testing.T) (send func() (string, error)) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", e.client, "curl", "-sS", "-H", "Expect:", "-T", "-", e.url(portEcho))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testenv.Output
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		<-exited
	})
	if _, err := io.WriteString(stdin, strings.Repeat("part of a long upload\n", 100)); err != nil {
		t.Fatal(err)
	}
	e.b.waitMetric(t, `strait_streams_open{point="egress"}`, func(v float64) bool { return v == 1 }, "upload stream open")
	if n := e.clientConns(t, portEcho); n != 1 {
		t.Fatalf("%d client connections established to the import, want 1", n)
	}
	return func() (string, error) {
		_, _ = io.WriteString(stdin, "more\n")
		stdin.Close()
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(patience):
			t.Fatalf("curl still running %v after its input ended", patience)
		}
		return "", nil
	}
}

// waitClientGone waits until the client's connection to the import left
// the established state, although curl, blocked on its input, has not
// used it.
func (e *env) waitClientGone(t *testing.T, why string) {
	t.Helper()
	for deadline := time.Now().Add(patience); e.clientConns(t, portEcho) != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("client connection still established %v after %s", patience, why)
		}
	}
	e.b.waitMetric(t, `strait_streams_open{point="egress"}`, func(v float64) bool { return v == 0 }, "stream ends with its peer")
}

// testStalledHost stops both gateway processes for longer than the
// keepalive timeout (1 s), as a starved host does, then lets them run
// again, the importing one first and the exporting one a few keepalive
// intervals later (a starved host does not give both the CPU at once).
// Each wakes to a silence that was its own — and its kernel heard nothing
// either, the peer was stopped too — so no session may end: an upload that
// was open carries on.
func testStalledHost(t *testing.T, e *env) {
	send := e.openUpload(t)
	procs := []*proc{e.b.proc, e.a.proc}
	signal := func(sig syscall.Signal) {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(sig)
		}
	}
	t.Cleanup(func() { signal(syscall.SIGCONT) })
	signal(syscall.SIGSTOP)
	time.Sleep(2500 * time.Millisecond)
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		time.Sleep(300 * time.Millisecond)
	}
	out, err := send()
	if err != nil || !strings.HasSuffix(out, "more\n") {
		t.Fatalf("upload across a 2.5 s stall of both gateways: %v: %q", err, out[max(0, len(out)-200):])
	}
	e.mustEcho(t, portEcho, "after the stall")
}

// testUnpacedForLossyRequests sends keep-alive 10 KB echoes over a WAN that
// drops 3 % of the gateways' segments (nft numgen as they arrive: a drop on
// output would only make the sender try again, not lose anything):
// the retransmissions, and the windows too small for a whole response that
// they leave, must not move a session to bbr, which would pace every
// response at the rate of the last ones (README, "Performance").
func testUnpacedForLossyRequests(t *testing.T, e *env) {
	const table = "strait_test_wanloss"
	// Run after the drops are gone (cleanups run last first): the bulk
	// rule counts the retransmissions since a session's last look when
	// that look is under a second old (README, "The WAN congestion
	// control"), so the next step's bulk, looking within a second of this
	// step's last look, took this step's losses for its own and moved its
	// session to bbr over a lossless link (BBROnlyForLossyBulk, 1 run in 8).
	t.Cleanup(func() { time.Sleep(1200 * time.Millisecond) })
	for _, g := range []*gw{e.a, e.b} {
		rules := fmt.Sprintf("table inet %s {\n chain in {\n type filter hook input priority 0;\n tcp sport %d numgen random mod 100 < 3 counter drop\n tcp dport %d numgen random mod 100 < 3 counter drop\n }\n}\n", table, wanPort, wanPort)
		cmd := exec.Command("ip", "netns", "exec", g.netns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: nft: %v: %s", g.cluster, err, out)
		}
		t.Cleanup(func() {
			_ = exec.Command("ip", "netns", "exec", g.netns, "nft", "delete", "table", "inet", table).Run()
		})
	}
	const requests, size = 120, 10000
	body := writeTemp(t, "req-*", strings.Repeat("r", size))
	args := []string{"--fail", "--data-binary", "@" + body}
	for range requests {
		args = append(args, e.url(portEcho))
	}
	if out, code := e.curl(t, args...); code != 0 || len(out) != requests*size {
		t.Fatalf("%d keep-alive echoes of %d bytes: curl exit %d, %d bytes back", requests, size, code, len(out))
	}
	retrans := 0
	for _, g := range []*gw{e.a, e.b} {
		out := testenv.Run(t, "ip", "netns", "exec", g.netns, "ss", "-tin", "state", "established", "( sport = :"+strconv.Itoa(wanPort)+" or dport = :"+strconv.Itoa(wanPort)+" )")
		if strings.Contains(out, "bbr") {
			t.Fatalf("%s: WAN sockets after lossy request/response traffic, want none on bbr:\n%s", g.cluster, out)
		}
		retrans += strings.Count(out, "bytes_retrans:")
	}
	if retrans == 0 {
		t.Fatalf("no WAN socket retransmitted anything: the drop rules did not bite:\n%s", testenv.Run(t, "ip", "netns", "exec", e.b.netns, "nft", "list", "table", "inet", table))
	}
	// Strait's own congestion control took the drops, on a WAN with no
	// queue, for random loss (docs/congestion.md).
	if features.HaveMapType(ebpf.StructOpsMap) == nil {
		random := e.a.metric(t, `strait_wan_congestion_losses_total{kind="random"}`) + e.b.metric(t, `strait_wan_congestion_losses_total{kind="random"}`)
		t.Logf("losses answered as random: %v", random)
		if random == 0 {
			t.Errorf("strait_wan_congestion_losses_total{kind=\"random\"} is 0 on both gateways after lossy requests")
		}
	}
}

// testLANCongestion sends keep-alive 100 KB echoes while the client's and
// the server's nodes drop 3 % of what the gateways send them: the gateways'
// LAN sockets (b's accepted client connection, a's connection to the
// target) run strait's LAN congestion control, which answers those drops
// (docs/congestion.md).
func testLANCongestion(t *testing.T, e *env) {
	if features.HaveMapType(ebpf.StructOpsMap) != nil {
		t.Skip("the kernel has no BPF struct_ops: LAN sockets keep the kernel's congestion control")
	}
	_, targetPort, _ := net.SplitHostPort(e.target)
	const table = "strait_test_lanloss"
	for ns, match := range map[string]string{e.client: "tcp sport " + strconv.Itoa(portEcho), e.server: "tcp dport " + targetPort} {
		rules := fmt.Sprintf("table inet %s {\n chain in {\n type filter hook input priority 0;\n %s meta length > 1000 numgen random mod 100 < 3 counter drop\n }\n}\n", table, match)
		cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: nft: %v: %s", ns, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", table).Run() })
	}
	const requests, size = 30, 100000
	body := writeTemp(t, "req-*", strings.Repeat("l", size))
	args := []string{"--fail", "--data-binary", "@" + body}
	for range requests {
		args = append(args, e.url(portEcho))
	}
	// Both kinds count: these LAN links add no delay, so the allowance
	// is half a minimum of some 30 µs, which the bursts' own queue on the
	// veth exceeds. TestShallowQueue and TestRandomLoss in tunnel/wancc
	// show the classification.
	losses := func(g *gw) float64 {
		return g.metric(t, `strait_lan_congestion_losses_total{kind="random"}`) + g.metric(t, `strait_lan_congestion_losses_total{kind="queue"}`)
	}
	before := map[*gw]float64{e.a: losses(e.a), e.b: losses(e.b)}
	// The sockets exist only while curl runs: sample them from the side
	// while the rounds of echoes go on, until both were seen.
	var (
		mu         sync.Mutex
		lanSockets [2]string // b's to the client, a's to the target, while the echoes run
	)
	sampled := func() [2]string {
		mu.Lock()
		defer mu.Unlock()
		return lanSockets
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			b, a := ssOut(e.b.netns, "sport = :"+strconv.Itoa(portEcho)), ssOut(e.a.netns, "dport = :"+targetPort)
			mu.Lock()
			if b != "" {
				lanSockets[0] = b
			}
			if a != "" {
				lanSockets[1] = a
			}
			mu.Unlock()
		}
	}()
	defer func() { close(stop); <-stopped }()
	// The rule sees segments as the veth carries them, GSO batches of up
	// to 64 KB, so 30 echoes may draw no drop at all: echo again until
	// both namespaces dropped a few.
	dropped := func(ns string) int {
		out := testenv.Run(t, "ip", "netns", "exec", ns, "nft", "list", "table", "inet", table)
		m := regexp.MustCompile(`counter packets (\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: no counter in the drop rule:\n%s", ns, out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	for round := 1; ; round++ {
		if out, code := e.curl(t, args...); code != 0 || len(out) != requests*size {
			t.Fatalf("%d keep-alive echoes of %d bytes: curl exit %d, %d bytes back", requests, size, code, len(out))
		}
		s := sampled()
		if dropped(e.client) >= 3 && dropped(e.server) >= 3 && s[0] != "" && s[1] != "" {
			break
		}
		if round == 10 {
			t.Fatalf("after %d rounds of echoes the rules dropped %d packets toward the client and %d toward the server; LAN sockets seen: %q", round, dropped(e.client), dropped(e.server), s)
		}
	}
	for i, s := range sampled() {
		if !strings.Contains(s, "straitl_") {
			t.Errorf("LAN socket %d, want strait's LAN congestion control (straitl_<pid>):\n%s", i, s)
		}
	}
	for _, g := range []*gw{e.a, e.b} {
		n := losses(g) - before[g]
		t.Logf("%s: LAN losses answered: %v", g.cluster, n)
		if n == 0 {
			t.Errorf("%s: strait_lan_congestion_losses_total did not grow over lossy echoes", g.cluster)
		}
	}
}

// ssOut is ss's list of established TCP sockets in namespace ns that
// match filter, with their TCP state, "" when none does.
func ssOut(ns, filter string) string {
	out, err := exec.Command("ip", "netns", "exec", ns, "ss", "-tinH", "state", "established", "( "+filter+" )").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// testBBROnlyForLossyBulk checks the WAN sockets' congestion control:
// after every earlier step's bulk over the lossless WAN they all still run
// the one they started on (strait's own, cubic where the kernel cannot load
// it), and a bulk upload through a queue that drops (tbf, 100 Mbit/s,
// 30 KB) switches the sending gateway's socket to bbr.
func testBBROnlyForLossyBulk(t *testing.T, e *env) {
	avail, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil || !strings.Contains(string(avail), "bbr") {
		t.Skipf("kernel lacks bbr: %q %v", avail, err)
	}
	start, own := "cubic", features.HaveMapType(ebpf.StructOpsMap) == nil
	if own {
		start = "strait_" // strait_<pid of the gateway>
	}
	wanSockets := func(g *gw) string {
		return testenv.Run(t, "ip", "netns", "exec", g.netns, "ss", "-tin", "state", "established", "( sport = :"+strconv.Itoa(wanPort)+" or dport = :"+strconv.Itoa(wanPort)+" )")
	}
	for _, g := range []*gw{e.a, e.b} {
		if out := wanSockets(g); strings.Contains(out, "bbr") || !strings.Contains(out, start) {
			t.Fatalf("%s: WAN sockets after bulk over a lossless link, want all on %s:\n%s", g.cluster, start, out)
		}
	}
	var route []struct{ Dev string }
	if err := json.Unmarshal([]byte(testenv.Run(t, "ip", "-n", e.b.netns, "-j", "route", "get", e.a.addr)), &route); err != nil || len(route) != 1 {
		t.Fatalf("route from b to a: %v %+v", err, route)
	}
	testenv.Run(t, "ip", "netns", "exec", e.b.netns, "tc", "qdisc", "replace", "dev", route[0].Dev, "root", "tbf", "rate", "100mbit", "burst", "16kb", "limit", "30kb")
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "exec", e.b.netns, "tc", "qdisc", "del", "dev", route[0].Dev, "root").Run()
	})
	in := filepath.Join(tmpDir, "bulk")
	if err := os.WriteFile(in, make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(in)
	if msg, code := e.curl(t, "--fail", "--data-binary", "@"+in, "-o", "/dev/null", e.url(portEcho)); code != 0 {
		t.Fatalf("curl exit %d: %s", code, msg)
	}
	if out := wanSockets(e.b); !strings.Contains(out, "bbr") {
		t.Fatalf("b: WAN sockets after 8 MiB through a dropping queue, want one on bbr:\n%s", out)
	}
}

// testPartition drops every packet between the gateways (blackhole routes
// on both): no FIN, no RST, only silence, which keepalives must notice.
func testPartition(t *testing.T, e *env) {
	send := e.openUpload(t)
	cut := [][]string{{e.a.netns, e.b.addr}, {e.b.netns, e.a.addr}}
	// The lab routes each node address as a /32; the blackhole replaces
	// that route and heal puts it back.
	var orig []string
	for _, c := range cut {
		orig = append(orig, strings.TrimSpace(testenv.Run(t, "ip", "-n", c[0], "route", "show", "exact", c[1]+"/32")))
	}
	healed := false
	heal := func() {
		if healed {
			return
		}
		healed = true
		for i, c := range cut {
			if orig[i] == "" {
				_ = exec.Command("ip", "-n", c[0], "route", "del", "blackhole", c[1]+"/32").Run()
				continue
			}
			testenv.Run(t, "ip", append([]string{"-n", c[0], "route", "replace"}, strings.Fields(orig[i])...)...)
		}
	}
	t.Cleanup(heal)
	for _, c := range cut {
		testenv.Run(t, "ip", "-n", c[0], "route", "replace", "blackhole", c[1]+"/32")
	}
	e.waitClientGone(t, "the WAN went silent")
	if out, err := send(); err == nil {
		t.Errorf("upload succeeded across a partition: %s", out)
	}
	// No session: new connections fail at once.
	failures := e.b.metric(t, "strait_stream_open_failures_total")
	e.b.waitMetric(t, `strait_peer_sessions_live{peer="a"}`, func(v float64) bool { return v == 0 }, "sessions given up")
	e.mustRefuse(t, portEcho)
	if got := e.b.metric(t, "strait_stream_open_failures_total") - failures; got != 1 {
		t.Errorf("stream open failures on b went up by %v, want 1", got)
	}

	heal()
	start := time.Now()
	e.b.waitLive(t, "a", 5)
	e.a.waitLive(t, "b", 0)
	e.mustEcho(t, portEcho, "healed")
	t.Logf("sessions back %v after the partition healed", time.Since(start).Round(time.Millisecond))
}

func testPeerDies(t *testing.T, e *env) {
	send := e.openUpload(t)
	e.a.proc.kill()
	e.waitClientGone(t, "the exporting gateway was killed")
	out, err := send()
	if err == nil {
		t.Errorf("open connection ended without error after the peer gateway died: %s", out)
	}
	t.Logf("open connection ended: %v: %s", err, strings.TrimSpace(out))

	// While a is down, new connections fail at once (no hang): no session
	// takes them.
	failures := e.b.metric(t, "strait_stream_open_failures_total")
	for range 3 {
		e.mustRefuse(t, portEcho)
	}
	if got := e.b.metric(t, "strait_stream_open_failures_total") - failures; got != 3 {
		t.Errorf("stream open failures on b went up by %v, want 3", got)
	}

	start := time.Now()
	e.a.start(t)
	for {
		out, code := e.curl(t, "--fail", "--data-binary", "back", e.url(portEcho))
		if code == 0 && out == "back" {
			break
		}
		if time.Since(start) > patience {
			t.Fatalf("traffic did not flow %v after the exporting gateway restarted: exit %d %s", patience, code, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("traffic flowed again %v after the exporting gateway restarted", time.Since(start).Round(time.Millisecond))
}

// testGracefulStop sends SIGTERM to both gateways while a client
// connection is open: each must end its connections, exit 0 and remove
// its admin socket.
func testGracefulStop(t *testing.T, e *env) {
	send := e.openUpload(t)
	for _, g := range []*gw{e.b, e.a} {
		if err := g.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-g.proc.done:
		case <-time.After(patience):
			t.Fatalf("gateway %s still running %v after SIGTERM", g.cluster, patience)
		}
		if g.proc.err != nil {
			t.Errorf("gateway %s: %v\n%s", g.cluster, g.proc.err, g.proc.out.String())
		}
		if _, err := os.Stat(g.socket); !os.IsNotExist(err) {
			t.Errorf("gateway %s left its admin socket: %v", g.cluster, err)
		}
	}
	if out, err := send(); err == nil {
		t.Errorf("upload through a stopped gateway succeeded: %s", out)
	}
}

// testFDExhaustion runs a third gateway (cluster c) with a small file
// descriptor limit and holds more client connections to its import than
// it has descriptors. Once the client lets go, the import must accept
// again: running out of descriptors is temporary.
func testFDExhaustion(t *testing.T, e *env) {
	const port = 8090
	if out, err := exec.Command(binary, "fabric", "issue", "c", "--dir", e.fabric).CombinedOutput(); err != nil {
		t.Fatalf("strait fabric issue c: %v\n%s", err, out)
	}
	res := writeTemp(t, "c-*.yaml", peerYAML("a", net.JoinHostPort(e.a.addr, strconv.Itoa(wanPort)))+
		importYAML("echo", e.b.addr, port, "a")+policyYAML("allow-all", 1000, "allow", ""))
	c := &gw{t: t, cluster: "c", netns: e.b.netns, addr: e.b.addr,
		socket: filepath.Join(tmpDir, "c.sock"), config: filepath.Join(tmpDir, "c.yaml")}
	// max-streams above the descriptor limit: the default (half of it)
	// would refuse the connections before descriptors run out, and this
	// test is about what happens when they do anyway.
	cfg := fmt.Sprintf("cluster: c\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\nresources: [%s]\nmax-streams: 1000\n",
		e.fabric, net.JoinHostPort(e.b.addr, "4446"), c.socket, filepath.Join(tmpDir, "c-state.json"), res)
	if err := os.WriteFile(c.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Soft and hard limit: the Go runtime raises the soft limit to the
	// hard one at start.
	c.proc = startIn(t, c.netns, "prlimit", "--nofile=48:48", binary, "gateway", "--config", c.config)
	c.waitLive(t, "a", 1)
	e.mustEcho(t, port, "before")

	const held = 100
	holder := startIn(t, e.client, "bash", "-c", fmt.Sprintf(
		"for i in $(seq %d); do exec {fd}<>/dev/tcp/%s/%d || exit 1; done; echo held; exec sleep 600", held, e.b.addr, port))
	for deadline := time.Now().Add(patience); !strings.Contains(holder.out.String(), "held"); time.Sleep(20 * time.Millisecond) {
		select {
		case <-holder.done:
			t.Fatalf("holder exited: %v: %s", holder.err, holder.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("holder did not open %d connections: %s", held, holder.out.String())
		}
	}
	if !strings.Contains(c.proc.out.String(), "import accept failed") {
		t.Errorf("gateway c did not run out of descriptors; the test proves nothing")
	}
	holder.kill()
	out, code := e.curl(t, "--fail", "--data-binary", "after", e.url(port))
	if code != 0 || out != "after" {
		t.Fatalf("import after descriptors ran out and came back: curl exit %d: %s\ngateway c:\n%s", code, out, c.proc.out.String())
	}
	c.proc.kill()
}

package gateway_test

import (
	"bufio"
	"encoding/json"
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
	"github.com/strait-net/strait/load"
)

// UDP imports of cluster b, each on its own clusterset IP, which b's gateway
// holds as a local range and b's client routes to it. A clusterset IP other
// than the gateway node's own address makes the reply's source address
// mean something: the clients here (dig, strait load udp) use connected
// sockets, so a reply from any other address never reaches them.
const (
	udpRange   = "10.96.0.0/24"
	ipDNS      = "10.96.0.50" // UDP 53 → a DNS server (strait's) in cluster a
	ipEcho     = "10.96.0.51" // 7001 TCP → the HTTP echo, 7001 UDP → the UDP echo
	ipDenyOut  = "10.96.0.52" // denied at egress (cluster b)
	ipDenyIn   = "10.96.0.53" // denied at ingress (cluster a)
	ipGhost    = "10.96.0.54" // imported, never exported
	ipEcho2    = "10.96.0.55" // 7001 UDP → the UDP echo, beside ipEcho's
	udpPort    = 7001
	udpMaxFlow = 16 // b's udp.max-flows, small enough to reach in a test
)

type udpEnv struct {
	a, b           *gw
	client, server string // namespaces
	nss            []string
}

func udpImportYAML(name, ip, ports string) string {
	return fmt.Sprintf(`apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: %s, namespace: default}
spec:
  type: ClusterSetIP
  ips: [%s]
  ports: %s
  clusters: [{cluster: a}]
---
`, name, ip, ports)
}

func udpExportYAML(name, ports string) string {
	return fmt.Sprintf("apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: %s, namespace: default}\nspec:\n  ports: %s\n---\n", name, ports)
}

// setupUDP builds the lab; bUDP adds fields to b's udp: configuration.
func setupUDP(t *testing.T, bUDP string) *udpEnv {
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("dig"); err != nil {
		t.Skip("needs dig (dnsutils)")
	}
	binary = testenv.StraitBinary(t)
	var err error
	if tmpDir, err = os.MkdirTemp("", testenv.UniqueName("sudp")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmpDir) })

	l := labUp(t, "u", topo)
	agw, bgw, server, client := labNode(t, l, "a/gw"), labNode(t, l, "b/gw"), labNode(t, l, "a/server"), labNode(t, l, "b/client")
	e := &udpEnv{client: client.Netns, server: server.Netns, nss: []string{agw.Netns, bgw.Netns, server.Netns, client.Netns}}
	testenv.Run(t, "ip", "-n", bgw.Netns, "route", "add", "local", udpRange, "dev", "lo")
	testenv.RouteVia(t, client.Netns, udpRange, bgw.Addr.String())
	// The client's datagrams leave from the address of the link the
	// route took, which b's sources name as namespace web.
	clientSrc := ""
	f := strings.Fields(testenv.Run(t, "ip", "-n", client.Netns, "-o", "route", "get", ipDNS))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "src" {
			clientSrc = f[i+1]
		}
	}
	if clientSrc == "" {
		t.Fatalf("no source address in the client's route to %s: %v", ipDNS, f)
	}

	fab := filepath.Join(tmpDir, "fabric")
	issueFabric(t, fab)
	srv := server.Addr.String()
	httpEcho := net.JoinHostPort(srv, "8080")
	udpEcho := net.JoinHostPort(srv, strconv.Itoa(udpPort))
	startWait(t, server.Netns, "listening", binary, "app", "echo", "--listen", httpEcho)
	startWait(t, server.Netns, "listening", binary, "load", "udp-server", "--listen", udpEcho)

	e.a = &gw{t: t, cluster: "a", netns: agw.Netns, addr: agw.Addr.String()}
	e.b = &gw{t: t, cluster: "b", netns: bgw.Netns, addr: bgw.Addr.String()}
	wan := func(g *gw) string { return net.JoinHostPort(g.addr, strconv.Itoa(wanPort)) }
	allowAll := policyYAML("allow-all", 1000, "allow", "")
	// The DNS server behind the export is cluster a's gateway's own
	// clusterset DNS, on a port of a's gateway node.
	dnsAddr := net.JoinHostPort(e.a.addr, "5353")
	udpPorts := fmt.Sprintf("[{name: udp, protocol: UDP, port: %d, target: %q}]", udpPort, udpEcho)
	resA := peerYAML("b", wan(e.b)) + allowAll +
		udpExportYAML("dns", fmt.Sprintf("[{name: dns, protocol: UDP, port: 53, target: %q}]", dnsAddr)) +
		udpExportYAML("uecho", fmt.Sprintf("[{name: tcp, port: %d, target: %q}, {name: udp, protocol: UDP, port: %d, target: %q}]", udpPort, httpEcho, udpPort, udpEcho)) +
		udpExportYAML("udeny", udpPorts) + udpExportYAML("uguard", udpPorts) + udpExportYAML("uecho2", udpPorts) +
		policyYAML("deny-uguard", 10, "deny", "  to: {exports: [uguard]}\n")
	resB := peerYAML("a", wan(e.a)) + allowAll +
		udpImportYAML("dns", ipDNS, "[{name: dns, protocol: UDP, port: 53}]") +
		udpImportYAML("uecho", ipEcho, fmt.Sprintf("[{name: tcp, protocol: TCP, port: %d}, {name: udp, protocol: UDP, port: %d}]", udpPort, udpPort)) +
		udpImportYAML("udeny", ipDenyOut, fmt.Sprintf("[{name: udp, protocol: UDP, port: %d}]", udpPort)) +
		udpImportYAML("uguard", ipDenyIn, fmt.Sprintf("[{name: udp, protocol: UDP, port: %d}]", udpPort)) +
		udpImportYAML("ughost", ipGhost, fmt.Sprintf("[{name: udp, protocol: UDP, port: %d}]", udpPort)) +
		udpImportYAML("uecho2", ipEcho2, fmt.Sprintf("[{name: udp, protocol: UDP, port: %d}]", udpPort)) +
		policyYAML("deny-udeny", 10, "deny", "  from: {namespaces: [web]}\n  to: {exports: [udeny]}\n")
	for _, g := range []*gw{e.a, e.b} {
		res, extra := resA, fmt.Sprintf("dns: %s\n", dnsAddr)
		if g == e.b {
			res = resB
			extra = fmt.Sprintf("sources:\n  - {cidr: %s/32, namespace: web, labels: {app: web}}\nudp: {idle-timeout: 2s, max-flows: %d%s}\n", clientSrc, udpMaxFlow, bUDP)
		}
		resFile := filepath.Join(tmpDir, g.cluster+"-resources.yaml")
		if err := os.WriteFile(resFile, []byte(res), 0o644); err != nil {
			t.Fatal(err)
		}
		g.socket = filepath.Join(tmpDir, g.cluster+".sock")
		g.config = filepath.Join(tmpDir, g.cluster+"-gateway.yaml")
		cfg := fmt.Sprintf("cluster: %s\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\nmetrics: %s\nresources: [%s]\n%s",
			g.cluster, fab, wan(g), g.socket, filepath.Join(tmpDir, g.cluster+"-state.json"), metricsAddr, resFile, extra)
		if err := os.WriteFile(g.config, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		g.start(t)
	}
	e.b.waitLive(t, "a", 5)
	e.a.waitLive(t, "b", 0)
	return e
}

// startWait starts argv in netns and waits until its output says ready.
func startWait(t *testing.T, netns, ready string, argv ...string) *proc {
	t.Helper()
	p := startIn(t, netns, argv...)
	for deadline := time.Now().Add(patience); !strings.Contains(p.out.String(), ready); time.Sleep(20 * time.Millisecond) {
		select {
		case <-p.done:
			t.Fatalf("%v exited: %v\n%s", argv, p.err, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v did not start: %s", argv, p.out.String())
		}
	}
	return p
}

// TestUDP carries UDP flows through two gateway processes in a two-cluster
// lab to real servers, with real clients: dig against a DNS server behind
// an export, and strait load udp against a UDP echo at 1 000 and 50 000
// datagrams per second. The steps share the lab and run in order.
func TestUDP(t *testing.T) {
	// Echo50k sends 50 000 datagrams/s to one import address, under the
	// default udp.import-rate (TestUDPImportRate tests the bound).
	e := setupUDP(t, "")
	for _, s := range []struct {
		name string
		f    func(*testing.T, *udpEnv)
	}{
		{"DigThroughExport", testUDPDig},
		{"Echo1k", func(t *testing.T, e *udpEnv) { testUDPEcho(t, e, 1000, 3*time.Second, 512, 4) }},
		{"Echo50k", func(t *testing.T, e *udpEnv) { testUDPEcho(t, e, 50000, 2*time.Second, 64, 4) }},
		{"TCPAndUDPOnOnePort", testUDPBesideTCP},
		{"PolicyEgressDeny", testUDPEgressDeny},
		{"PolicyIngressDeny", testUDPIngressDeny},
		{"UnknownExport", testUDPGhost},
		{"IdleFlowsEnd", testUDPIdle},
		{"FlowLimit", testUDPFlowLimit},
	} {
		if !t.Run(s.name, func(t *testing.T) { s.f(t, e) }) {
			break
		}
	}
}

// digAt asks the DNS server at ip:53 from the client and returns the
// status and the answer's record data.
func (e *udpEnv) digAt(t *testing.T, ip, qtype, qname string) (status, answer string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", e.client, "dig", "@"+ip, "-p", "53",
		"+time=3", "+tries=3", "+noall", "+comments", "+answer", qtype, qname).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %s %s: %v\n%s", qtype, qname, err, out)
	}
	var data []string
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "status: "); i >= 0 {
			status = strings.TrimSuffix(strings.Fields(line[i+len("status: "):])[0], ",")
			continue
		}
		if strings.Contains(line, "unexpected source") {
			t.Errorf("dig: %s", line)
		}
		if line == "" || strings.HasPrefix(line, ";") {
			continue
		}
		if f := strings.Fields(line); len(f) >= 5 {
			data = append(data, strings.Join(f[4:], " "))
		}
	}
	return status, strings.Join(data, "\n")
}

func testUDPDig(t *testing.T, e *udpEnv) {
	const flows = `strait_udp_flows_total{point="ingress"}`
	st, err := e.b.admin().Status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.UDPImports) != 6 || !strings.HasPrefix(st.UDPImports[0], "default/dns "+ipDNS+":53 flows ") {
		t.Errorf("b's status lists UDP imports %q, want the 6, default/dns first", st.UDPImports)
	}
	before := e.a.metric(t, flows)
	for _, tt := range []struct{ qtype, qname, status, answer string }{
		{"TXT", "dns-version.clusterset.local", "NOERROR", `"1.0.0"`},
		{"A", "nope.default.svc.clusterset.local", "NXDOMAIN", ""},
	} {
		status, answer := e.digAt(t, ipDNS, tt.qtype, tt.qname)
		if status != tt.status || answer != tt.answer {
			t.Errorf("dig @%s %s %s: status %s, answer %q; want %s, %q", ipDNS, tt.qtype, tt.qname, status, answer, tt.status, tt.answer)
		}
	}
	// Each dig is its own flow (a fresh source port), carried to a.
	if got := e.a.metric(t, flows) - before; got < 2 {
		t.Errorf("flows at the exporting gateway went up by %v, want at least 2 (one per dig)", got)
	}
}

// loadUDP runs strait load udp on the client and returns its result.
func (e *udpEnv) loadUDP(t *testing.T, addr string, rate int, d time.Duration, size, flows int, timeout time.Duration) load.UDPResult {
	t.Helper()
	r, msg, err := e.runLoadUDP(addr, rate, d, size, flows, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("strait load udp --rate %d --size %d --flows %d: %s", rate, size, flows, msg)
	return r
}

// runLoadUDP is loadUDP for any goroutine: it returns the command's
// output, and its failure instead of ending the test.
func (e *udpEnv) runLoadUDP(addr string, rate int, d time.Duration, size, flows int, timeout time.Duration) (load.UDPResult, string, error) {
	var r load.UDPResult
	out := filepath.Join(tmpDir, testenv.UniqueName("udp-")+".json")
	cmd := exec.Command("ip", "netns", "exec", e.client, binary, "load", "udp", "--addr", addr, "--rate", strconv.Itoa(rate),
		"--duration", d.String(), "--size", strconv.Itoa(size), "--flows", strconv.Itoa(flows), "--timeout", timeout.String(), "--json", out)
	msg, err := cmd.CombinedOutput()
	if err != nil {
		return r, "", fmt.Errorf("strait load udp: %v\n%s", err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return r, "", err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, "", fmt.Errorf("strait load udp --json: %v", err)
	}
	return r, strings.TrimSpace(string(msg)), nil
}

// rcvbufErrors returns UDP RcvbufErrors of each of the lab's namespaces:
// datagrams the kernel dropped because a socket's receive buffer was full.
func (e *udpEnv) rcvbufErrors(t *testing.T) map[string]float64 {
	t.Helper()
	sum := map[string]float64{}
	for _, ns := range e.nss {
		out := testenv.Run(t, "ip", "netns", "exec", ns, "cat", "/proc/net/snmp")
		var names []string
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 0 || f[0] != "Udp:" {
				continue
			}
			if names == nil {
				names = f
				continue
			}
			for i, n := range names {
				if n == "RcvbufErrors" && i < len(f) {
					v, _ := strconv.ParseFloat(f[i], 64)
					sum[ns] += v
				}
			}
			break
		}
	}
	return sum
}

// udpDrops sums a gateway's UDP drop counters but import_rate's: those
// are the kernel's drops at an unread socket, which rcvbufErrors counts.
func udpDrops(m map[string]float64) float64 {
	var sum float64
	for k, v := range m {
		if strings.HasPrefix(k, "strait_udp_drops_total{") && !strings.Contains(k, `reason="import_rate"`) {
			sum += v
		}
	}
	return sum
}

// testUDPEcho sends rate datagrams/s through the import to the UDP echo:
// every echo must come back byte for byte, and every datagram lost must be
// accounted for by a counter: the gateways' drops, or the kernel's full
// socket buffers on the path. Loss itself is reported, not judged: on a
// shared 2-core host it is the host's load.
func testUDPEcho(t *testing.T, e *udpEnv, rate int, d time.Duration, size, flows int) {
	ma, mb, kernel := e.a.metrics(t), e.b.metrics(t), e.rcvbufErrors(t)
	r := e.loadUDP(t, net.JoinHostPort(ipEcho, strconv.Itoa(udpPort)), rate, d, size, flows, 3*time.Second)
	want := uint64(float64(rate)*d.Seconds() + 0.5)
	if r.Sent+r.SendErrors != want || r.Corrupt != 0 || r.Duplicates != 0 {
		t.Fatalf("sent %d (+%d errors) of %d, corrupt %d, duplicates %d: want all sent, none corrupt or repeated", r.Sent, r.SendErrors, want, r.Corrupt, r.Duplicates)
	}
	if r.Received == 0 {
		t.Fatalf("no echo came back")
	}
	ma2, mb2, kernel2 := e.a.metrics(t), e.b.metrics(t), e.rcvbufErrors(t)
	drops := udpDrops(mb2) - udpDrops(mb) + udpDrops(ma2) - udpDrops(ma)
	var kernelDrops float64
	var where []string
	for _, ns := range e.nss {
		if d := kernel2[ns] - kernel[ns]; d > 0 {
			kernelDrops += d
			where = append(where, fmt.Sprintf("%s %v", ns, d))
		}
	}
	explained := drops + kernelDrops + float64(r.Late)
	t.Logf("rate %d: lost %d (%.3f%%): gateway drops %v, kernel receive-buffer drops %v %v, late %d", rate, r.Lost, r.LossPct, drops, kernelDrops, where, r.Late)
	if float64(r.Lost) != explained {
		t.Errorf("lost %d datagrams, counters explain %v (gateway drops %v, kernel %v, late %d)", r.Lost, explained, drops, kernelDrops, r.Late)
	}
	// What the importing gateway carried toward a is what the exporting
	// one sent to the target or counted as not delivered, and the replies
	// likewise the other way.
	delta := func(m2, m map[string]float64, k string) float64 { return m2[k] - m[k] }
	dg := func(point, dir string) string {
		return `strait_udp_datagrams_total{direction="` + dir + `",point="` + point + `"}` // labels in Prometheus's (sorted) order
	}
	drop := func(point, reason string) string {
		return `strait_udp_drops_total{point="` + point + `",reason="` + reason + `"}`
	}
	bOut, aIn := delta(mb2, mb, dg("egress", "out")), delta(ma2, ma, dg("ingress", "in"))
	aLost := delta(ma2, ma, drop("ingress", "target_unreachable")) + delta(ma2, ma, drop("ingress", "send_failed"))
	if bOut != aIn+aLost || bOut < float64(r.Received) {
		t.Errorf("b carried %v datagrams toward a; a delivered %v and lost %v; %d echoes came back", bOut, aIn, aLost, r.Received)
	}
	aOut, bIn := delta(ma2, ma, dg("ingress", "out")), delta(mb2, mb, dg("egress", "in"))
	if bLost := delta(mb2, mb, drop("egress", "send_failed")); aOut != bIn+bLost || bIn < float64(r.Received) {
		t.Errorf("a carried %v replies toward b; b delivered %v and lost %v; %d echoes came back", aOut, bIn, bLost, r.Received)
	}
	bytesOut := mb2[`strait_udp_bytes_total{direction="out",point="egress"}`] - mb[`strait_udp_bytes_total{direction="out",point="egress"}`]
	if n := mb2[`strait_udp_datagrams_total{direction="out",point="egress"}`] - mb[`strait_udp_datagrams_total{direction="out",point="egress"}`]; bytesOut != n*float64(size) {
		t.Errorf("b counted %v bytes for %v datagrams of %d bytes", bytesOut, n, size)
	}
}

// testUDPBesideTCP: TCP and UDP on the same import port reach their own
// targets (the HTTP echo and the UDP echo of the previous steps).
func testUDPBesideTCP(t *testing.T, e *udpEnv) {
	out, err := exec.Command("ip", "netns", "exec", e.client, "curl", "-sS", "--max-time", curlMax, "--fail", "--data-binary", "tcp too",
		"http://"+net.JoinHostPort(ipEcho, strconv.Itoa(udpPort))+"/").CombinedOutput()
	if err != nil || string(out) != "tcp too" {
		t.Fatalf("TCP on the UDP import's port: %v, %q; want the HTTP echo", err, out)
	}
}

func testUDPEgressDeny(t *testing.T, e *udpEnv) {
	const (
		denials = `strait_policy_denials_total{point="egress"}`
		drops   = `strait_udp_drops_total{point="egress",reason="denied"}`
		flowsA  = `strait_udp_flows_total{point="ingress"}`
	)
	mb, flows := e.b.metrics(t), e.a.metric(t, flowsA)
	r := e.loadUDP(t, net.JoinHostPort(ipDenyOut, strconv.Itoa(udpPort)), 100, 300*time.Millisecond, 64, 1, 500*time.Millisecond)
	mb2 := e.b.metrics(t)
	if r.Received != 0 {
		t.Errorf("%d echoes through a denied import", r.Received)
	}
	// One flow, one decision a second (udpRetry); every datagram of it
	// dropped and counted. 30 datagrams in 0.3 s make one decision, or
	// two on a host that starved the gateway for most of a second.
	if got := mb2[denials] - mb[denials]; got < 1 || got > 2 {
		t.Errorf("egress denials went up by %v, want 1 (2 at most on a starved host), not one per datagram", got)
	}
	if got := mb2[drops] - mb[drops]; got != float64(r.Sent) {
		t.Errorf("denied drops went up by %v, want the %d datagrams sent", got, r.Sent)
	}
	if got := e.a.metric(t, flowsA); got != flows {
		t.Errorf("a opened %v flows for a flow denied at b", got-flows)
	}
}

func testUDPIngressDeny(t *testing.T, e *udpEnv) {
	const denials = `strait_policy_denials_total{point="ingress"}`
	before := e.a.metric(t, denials)
	r := e.loadUDP(t, net.JoinHostPort(ipDenyIn, strconv.Itoa(udpPort)), 100, 300*time.Millisecond, 64, 1, 500*time.Millisecond)
	if r.Received != 0 {
		t.Errorf("%d echoes through an import its export denies", r.Received)
	}
	// The refusal holds the flow for a second, so one flow, one denial
	// (two on a host that starved the gateways for most of a second).
	if got := e.a.metric(t, denials) - before; got < 1 || got > 2 {
		t.Errorf("ingress denials went up by %v, want 1 (2 at most on a starved host), not one per datagram", got)
	}
	waitLog(t, e.b, "flow reset by peer", "denied by policy")
}

func testUDPGhost(t *testing.T, e *udpEnv) {
	const refused = "strait_streams_refused_total"
	before := e.a.metric(t, refused)
	r := e.loadUDP(t, net.JoinHostPort(ipGhost, strconv.Itoa(udpPort)), 100, 300*time.Millisecond, 64, 1, 500*time.Millisecond)
	if r.Received != 0 {
		t.Errorf("%d echoes through an import nobody exports", r.Received)
	}
	if got := e.a.metric(t, refused) - before; got < 1 || got > 2 {
		t.Errorf("streams refused on a went up by %v, want 1 (2 at most on a starved host), not one per datagram", got)
	}
	waitLog(t, e.b, "flow reset by peer", "unknown export default/ughost")
}

// waitLog waits until g's log has a line holding every one of words.
func waitLog(t *testing.T, g *gw, words ...string) {
	t.Helper()
	for deadline := time.Now().Add(patience); ; time.Sleep(50 * time.Millisecond) {
		for _, line := range strings.Split(g.proc.out.String(), "\n") {
			ok := true
			for _, w := range words {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's log has no line with %q", g.cluster, words)
		}
	}
}

// testUDPIdle: with no datagrams, every flow ends at both gateways after
// b's idle timeout (2s) — a's own (30s) is not what ends them: b closes
// the stream.
func testUDPIdle(t *testing.T, e *udpEnv) {
	e.b.waitMetric(t, `strait_udp_flows_open{point="egress"}`, func(v float64) bool { return v == 0 }, "idle flows end")
	e.a.waitMetric(t, `strait_udp_flows_open{point="ingress"}`, func(v float64) bool { return v == 0 }, "idle flows end")
}

// testUDPFlowLimit: past b's udp.max-flows, the datagrams of the flows that
// found no slot are dropped and counted; the others are carried.
func testUDPFlowLimit(t *testing.T, e *udpEnv) {
	const drops = `strait_udp_drops_total{point="egress",reason="flow_limit"}`
	before := e.b.metric(t, drops)
	const flows, rate = udpMaxFlow + 4, 200
	r := e.loadUDP(t, net.JoinHostPort(ipEcho, strconv.Itoa(udpPort)), rate, time.Second, 64, flows, 2*time.Second)
	dropped := e.b.metric(t, drops) - before
	// The first 16 flows get a slot; the last 4 send 4/20 of the datagrams.
	// Echoes later than the timeout (a starved host) still came back.
	if want := float64(r.Sent * 4 / flows); dropped != want || r.Received+r.Late != r.Sent-uint64(want) {
		t.Errorf("flow limit %d, %d flows: %v datagrams dropped, %d of %d received (%d late); want %v dropped, the rest received", udpMaxFlow, flows, dropped, r.Received, r.Sent, r.Late, want)
	}
}

// TestUDPImportRate: a flood at one import address is read at b's
// udp.import-rate and no faster; the kernel drops the rest at the
// unread socket and b counts it (reason import_rate), while every
// datagram of a client of another import address comes back. Counts,
// not latency: what b carried of the flood is at most the rate over the
// time it was measured in, plus one window's quota.
func TestUDPImportRate(t *testing.T) {
	const rate = 1000 // b's udp.import-rate
	e := setupUDP(t, fmt.Sprintf(", import-rate: %d", rate))
	const (
		dg      = `strait_udp_datagrams_total{direction="out",point="egress"}`
		limited = `strait_udp_drops_total{point="egress",reason="import_rate"}`
	)
	mb, kernel := e.b.metrics(t), e.rcvbufErrors(t)
	start := time.Now()
	type result struct {
		r   load.UDPResult
		msg string
		err error
	}
	flood := make(chan result, 1)
	go func() {
		// 20 times the rate, in 1200-byte datagrams: b's socket buffer
		// fills within the second and the kernel drops the rest.
		r, msg, err := e.runLoadUDP(net.JoinHostPort(ipEcho, strconv.Itoa(udpPort)), 20*rate, time.Second, 1200, 4, time.Second)
		flood <- result{r, msg, err}
	}()
	victim := e.loadUDP(t, net.JoinHostPort(ipEcho2, strconv.Itoa(udpPort)), 200, 2*time.Second, 64, 1, 3*time.Second)
	f := <-flood
	if f.err != nil {
		t.Fatal(f.err)
	}
	t.Logf("flood: %s", f.msg)
	mb2, kernel2 := e.b.metrics(t), e.rcvbufErrors(t)
	elapsed := time.Since(start)
	if victim.Received+victim.Late != victim.Sent || victim.Sent == 0 {
		t.Errorf("the other import's client: %d of %d echoed (%d late), want all", victim.Received, victim.Sent, victim.Late)
	}
	carried := mb2[dg] - mb[dg] - float64(victim.Sent)
	dropped := mb2[limited] - mb[limited]
	kernelB := kernel2[e.nss[1]] - kernel[e.nss[1]]
	bound := float64(rate)*elapsed.Seconds() + float64(gateway.UDPBudgetQuota(rate))
	t.Logf("flood sent %d, b carried %v (bound %v over %v), dropped as import_rate %v, b's kernel receive-buffer drops %v", f.r.Sent, carried, bound, elapsed.Round(time.Millisecond), dropped, kernelB)
	if carried > bound {
		t.Errorf("b carried %v of the flood in %v, more than import-rate %d allows (%v)", carried, elapsed, rate, bound)
	}
	if dropped == 0 || dropped > kernelB {
		t.Errorf("b counted %v import_rate drops, its kernel %v receive-buffer drops: want some, no more than the kernel's", dropped, kernelB)
	}
}

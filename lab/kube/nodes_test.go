package kube_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/internal/testenv/k8snodes"
	"github.com/strait-net/strait/k8s/k8stest"
	"github.com/strait-net/strait/lab/kube"
	"github.com/strait-net/strait/lab/kube/linkemu"
	"github.com/strait-net/strait/load"
)

// patience bounds every wait on real nodes: a hang detector for a loaded
// 2-core host, not a performance bound.
const patience = 5 * time.Minute

// pair is two clusters of one real node each from scripts/k8s-nodes.sh
// (docs/k8s-nodes.md).
type pair struct{ *k8snodes.Nodes }

func upPair(t *testing.T, bin string) *pair {
	t.Helper()
	return &pair{k8snodes.Up(t, "kl", bin, "a", "b")}
}

// netns is cluster a's node: it reaches both API servers (the lab routes
// node addresses between clusters), the host does not.
func (p *pair) netns() string { return p.Netns["a"] }

// nodeNetns is cluster c's node's network namespace.
func (p *pair) nodeNetns(c string) string { return p.Netns[c] }

// eventually polls f until it succeeds, for at most patience.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	k8snodes.Eventually(t, what, patience, 500*time.Millisecond, f)
}

// deployStrait installs strait in both clusters the way the README does:
// deploy/ through an overlay per cluster, identities from `strait fabric`,
// deploy/dns in the client's cluster. The broker runs as a host-network pod
// on a's node, so that tearing the clusters down removes it too.
func deployStrait(t *testing.T, p *pair, bin, tmp string) {
	t.Helper()
	fab := filepath.Join(tmp, "fabric")
	for _, args := range [][]string{
		{"fabric", "init", "--dir", fab, "--clusterset", "cs"},
		{"fabric", "issue", "a", "--dir", fab},
		{"fabric", "issue", "b", "--dir", fab},
		{"fabric", "issue", "--broker", "broker1", "--dir", fab},
	} {
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("strait %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	broker := p.Addr["a"] + ":4500"
	deploy := filepath.Join(k8stest.Root(), "deploy")
	gw, err := os.ReadFile(filepath.Join(deploy, "config", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []string{"a", "b"} {
		dir := filepath.Join(tmp, "overlay-"+c)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(dir, deploy)
		if err != nil {
			t.Fatal(err)
		}
		addr := p.Addr[c]
		write(filepath.Join(dir, "strait.env"), fmt.Sprintf("cluster=%s\nbroker=%s\ngateway-wan=%s:4443\ngateway-ips=%s\nclusterset-ips=10.255.0.0/16\n", c, broker, addr, addr))
		write(filepath.Join(dir, "gateway.yaml"), strings.Replace(string(gw), "cluster: a ", "cluster: "+c+" ", 1))
		write(filepath.Join(dir, "kustomization.yaml"), fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: strait-system
resources: [%s]
images: [{name: ghcr.io/strait-net/strait, newTag: lab}] # scripts/k8s-images.sh
configMapGenerator:
  - {name: strait-config, behavior: replace, envs: [strait.env]}
  - {name: strait-gateway, behavior: replace, files: [gateway.yaml]}
patches:
  - target: {kind: Deployment, name: strait-gateway}
    patch: '[{"op": "replace", "path": "/spec/replicas", "value": 1}]'
`, rel))
		p.Must(t, c, "", "apply", "-k", dir)
		p.Must(t, c, "", "-n", "strait-system", "create", "secret", "generic", "strait-identity",
			"--from-file="+filepath.Join(fab, "ca.crt"), "--from-file="+filepath.Join(fab, c+".crt"), "--from-file="+filepath.Join(fab, c+".key"))
	}
	p.Must(t, "a", "", "-n", "strait-system", "create", "secret", "generic", "strait-broker",
		"--from-file="+filepath.Join(fab, "ca.crt"), "--from-file="+filepath.Join(fab, "broker1.crt"), "--from-file="+filepath.Join(fab, "broker1.key"))
	p.Must(t, "a", fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: strait-broker, namespace: strait-system}
data:
  broker.yaml: "id: broker1\nidentity: {dir: /etc/strait/identity}\nlisten: %s\nstore: {path: /data/broker.db}\n"
---
apiVersion: v1
kind: Pod
metadata: {name: strait-broker, namespace: strait-system}
spec:
  hostNetwork: true
  containers:
    - name: broker
      image: ghcr.io/strait-net/strait:lab
      args: [broker, --config, /etc/strait/broker.yaml]
      volumeMounts:
        - {name: identity, mountPath: /etc/strait/identity}
        - {name: config, mountPath: /etc/strait/broker.yaml, subPath: broker.yaml}
        - {name: data, mountPath: /data}
  volumes:
    - {name: identity, secret: {secretName: strait-broker}}
    - {name: config, configMap: {name: strait-broker}}
    - {name: data, emptyDir: {}}
`, broker), "apply", "-f", "-")
	for _, c := range []string{"a", "b"} {
		for _, d := range []string{"strait-controller", "strait-gateway"} {
			eventually(t, c+": "+d+" ready", func() error {
				_, err := p.Kubectl(c, "", "-n", "strait-system", "wait", "--for=condition=Ready", "--timeout=2s", "pod", "-l", "app.kubernetes.io/name="+d)
				return err
			})
		}
	}
	// The client's CoreDNS forwards clusterset.local to strait's DNS.
	ip := strings.TrimSpace(p.Must(t, "b", "", "-n", "strait-system", "get", "svc", "strait-dns", "-o", "jsonpath={.spec.clusterIP}"))
	dnsDir := filepath.Join(tmp, "dns")
	if err := os.MkdirAll(dnsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kustomization.yaml", "coredns-custom.yaml"} {
		b, err := os.ReadFile(filepath.Join(deploy, "dns", f))
		if err != nil {
			t.Fatal(err)
		}
		write(filepath.Join(dnsDir, f), strings.ReplaceAll(string(b), "STRAIT_DNS_IP", ip))
	}
	p.Must(t, "b", "", "apply", "-k", dnsDir)
	p.Must(t, "b", "", "-n", "kube-system", "rollout", "restart", "deployment/coredns")
	eventually(t, "b: coredns restarted", func() error {
		_, err := p.Kubectl("b", "", "-n", "kube-system", "rollout", "status", "--timeout=2s", "deployment/coredns")
		return err
	})
}

// leftovers lists what any strait lab run left in the pair: namespaces,
// AccessPolicies and link emulation DaemonSets with the lab's label, and
// on the nodes the emulation's devices (nodeemu's "stk…"), netem and tbf
// qdiscs, and tc programs attached by tcx (nodeemu's, held by the agent).
func (p *pair) leftovers(t *testing.T) string {
	t.Helper()
	var left []string
	for _, c := range []string{"a", "b"} {
		for _, kind := range []string{"namespaces", "accesspolicies.strait.dev"} {
			out := p.Must(t, c, "", "get", kind, "-l", kube.ManagedByLabel+"="+kube.ManagedBy, "-o", "name")
			if s := strings.TrimSpace(out); s != "" {
				left = append(left, c+": "+strings.ReplaceAll(s, "\n", " "))
			}
		}
		out := p.Must(t, c, "", "get", "daemonsets", "-A", "-l", linkemu.LabelManagedBy+"="+kube.ManagedBy, "-o", "name")
		if s := strings.TrimSpace(out); s != "" {
			left = append(left, c+": "+strings.ReplaceAll(s, "\n", " "))
		}
		for _, l := range strings.Split(testenv.Run(t, "ip", "-n", p.nodeNetns(c), "-o", "link", "show"), "\n") {
			if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[1], "stk") {
				left = append(left, c+": device "+strings.TrimSuffix(f[1], ":"))
			}
		}
		if q := testenv.Run(t, "tc", "-n", p.nodeNetns(c), "qdisc", "show"); strings.Contains(q, "netem") || strings.Contains(q, "tbf") {
			left = append(left, c+": netem or tbf qdiscs: "+q)
		}
		if links := testenv.TCXLinks(t, p.nodeNetns(c)); len(links) > 0 {
			left = append(left, c+": tcx programs: "+strings.Join(links, ", "))
		}
	}
	return strings.Join(left, "; ")
}

// interrupt sends the run cmd Ctrl-C and waits until it has ended, which
// must be with an error.
func interrupt(t *testing.T, cmd *exec.Cmd, log *bytes.Buffer) {
	t.Helper()
	// Ctrl-C reaches `ip netns exec`'s child too: it is the same
	// process after exec.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("an interrupted run succeeded:\n%s", log)
		}
	case <-time.After(patience):
		_ = cmd.Process.Kill()
		t.Fatalf("the run did not end %v after SIGINT:\n%s", patience, log)
	}
}

// labRun starts `strait lab run` in a's node namespace (where both API
// servers are reachable) as a user runs it.
func labRun(t *testing.T, p *pair, bin, dir string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", p.netns(), bin, "lab", "run"}, args...)...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

// experiment is quickstart reduced to what a test measures quickly: lcl,
// direct and strait, a few echoes on kept and on new connections, and a
// short bulk stream.
const experiment = `name: kube-test
topology:
  name: lab
  clusters:
    - {name: a, nodes: [{name: gw, gateway: true}, {name: server}]}
    - {name: b, nodes: [{name: gw, gateway: true}, {name: client}]}
  wan:
    - between: [a, b]
scenarios: [lcl]
tools: [direct, strait]
server: a/server
client: b/client
workloads:
  - {name: echo, payloads: [1KB]}
  - {name: echo, payloads: [1KB], keepalive: false}
load: {requests: 20, warmup: 2}
throughput: {streams: [1], duration: 500ms}
`

// requireAllOK fails t unless the per-request CSV at path holds `least`
// requests or more, every one answered.
func requireAllOK(t *testing.T, path string, least int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := load.ReadCSV(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ok := 0
	for _, s := range samples {
		if s.OK() {
			ok++
		}
	}
	if len(samples) < least || ok != len(samples) {
		t.Errorf("%s: %d requests, %d answered; want %d or more, all answered", filepath.Base(path), len(samples), ok, least)
	}
}

// TestRunOnClusters runs an experiment on two real clusters the way a
// user does: interrupted with Ctrl-C once its namespace exists (nothing may
// be left), resumed to completion (every cell's CSV back in the run
// directory, the report written, nothing left), a run whose namespace is
// deleted under it (a clear error, nothing left; --resume finishes it), a
// run whose pods cannot start (an error naming the pod and why), and
// `strait lab down --clusters` removing a run's leftovers.
func TestRunOnClusters(t *testing.T) {
	k8snodes.Require(t)
	if testing.Short() {
		t.Skip("brings up two Kubernetes clusters")
	}
	bin := testenv.StraitBinary(t)
	start := time.Now()
	p := upPair(t, bin)
	tmp := t.TempDir()
	deployStrait(t, p, bin, tmp)
	t.Logf("setup: %v", time.Since(start).Round(time.Second))
	write := func(name, s string) string {
		path := filepath.Join(tmp, name)
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	clusters := write("clusters.yaml", fmt.Sprintf("clusters:\n  a: {kubeconfig: %s}\n  b: {kubeconfig: %s}\n", p.Kubeconfig["a"], p.Kubeconfig["b"]))
	exp := write("experiment.yaml", experiment)
	out := filepath.Join(tmp, "results")
	unitNS := func(c string) string {
		s, _ := p.Kubectl(c, "", "get", "namespaces", "-l", kube.ManagedByLabel+"="+kube.ManagedBy, "-o", "name")
		return strings.TrimPrefix(strings.TrimSpace(s), "namespace/")
	}

	t.Run("Interrupted", func(t *testing.T) {
		cmd, log := labRun(t, p, bin, tmp, exp, "--clusters", clusters, "--out", out)
		eventually(t, "the unit's namespace in b", func() error {
			if unitNS("b") == "" {
				return fmt.Errorf("none yet; run says: %s", log)
			}
			return nil
		})
		interrupt(t, cmd, log)
		if left := p.leftovers(t); left != "" {
			t.Fatalf("left after Ctrl-C: %s\nrun said:\n%s", left, log)
		}
	})

	var runDir string
	t.Run("Resume", func(t *testing.T) {
		dirs, _ := filepath.Glob(filepath.Join(out, "kube-test-*"))
		if len(dirs) != 1 {
			t.Fatalf("run directories %v, want the interrupted one", dirs)
		}
		cmd, log := labRun(t, p, bin, tmp, exp, "--clusters", clusters, "--resume", dirs[0])
		if err := cmd.Wait(); err != nil {
			t.Fatalf("resumed run: %v\n%s", err, log)
		}
		t.Logf("resumed run:\n%s", log)
		runDir = dirs[0]
		for _, tool := range []string{"direct", "strait"} {
			for _, w := range []string{"echo", "echo-newconn"} {
				requireAllOK(t, filepath.Join(dirs[0], "raw", "lcl-"+tool+"-"+w+"-1KB-r1.csv"), 20)
			}
		}
		// The bulk stream through each tool: strait load stream's JSON
		// result, as the namespace lab keeps it.
		for _, tool := range []string{"direct", "strait"} {
			b, err := os.ReadFile(filepath.Join(dirs[0], "raw", "lcl-"+tool+"-stream-x1-r1.json"))
			if err != nil {
				t.Fatal(err)
			}
			var res load.StreamResult
			if err := json.Unmarshal(b, &res); err != nil {
				t.Fatal(err)
			}
			if res.Mode != "stream" || res.Bytes == 0 || res.Gbps <= 0 {
				t.Errorf("%s stream: %+v, want bytes sent", tool, res)
			}
		}
		for _, f := range []string{"report.html", "requests.csv", "summary.json", "table.txt", "throughput.json"} {
			if st, err := os.Stat(filepath.Join(dirs[0], f)); err != nil || st.Size() == 0 {
				t.Errorf("%s: %v (empty or missing)", f, err)
			}
		}
		var md struct {
			Clusters kube.Metadata `json:"clusters"`
		}
		b, err := os.ReadFile(filepath.Join(dirs[0], "metadata.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &md); err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{"a", "b"} {
			ci := md.Clusters.Clusters[c]
			if ci == nil || ci.Version == "" || len(ci.Nodes) != 1 || ci.Nodes[0].Kernel == "" {
				t.Errorf("metadata of cluster %s: %+v", c, ci)
			}
		}
		// The lab routes only node addresses between its clusters
		// (docs/k8s-nodes.md), so direct must have found no pod route.
		for unit, how := range md.Clusters.Direct {
			if how != kube.DirectNodePort {
				t.Errorf("unit %s: direct went by %q, want nodeport (pod networks are not routed between these clusters)", unit, how)
			}
		}
		if len(md.Clusters.Direct) != 1 {
			t.Errorf("direct paths %v: want the resumed unit's", md.Clusters.Direct)
		}
		// The report shows what the metadata records about the clusters.
		raw, err := os.ReadFile(filepath.Join(dirs[0], "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		page := html.UnescapeString(string(raw)) // html/template escapes ' and +
		facts := []string{`id="clusters"`, "nodeport: a NodePort Service on the server pod's node"}
		for _, c := range []string{"a", "b"} {
			if ci := md.Clusters.Clusters[c]; ci != nil && len(ci.Nodes) == 1 {
				n := ci.Nodes[0]
				facts = append(facts, ci.Server, ci.Version, n.Kernel, n.ContainerRuntime, n.OSImage, strings.ReplaceAll(n.PodCIDRs, ",", ", "))
			}
		}
		for _, want := range facts {
			if !strings.Contains(page, want) {
				t.Errorf("report.html does not show %q", want)
			}
		}
		if left := p.leftovers(t); left != "" {
			t.Fatalf("left after the run: %s", left)
		}
	})

	// The installed tool measures whatever interconnect the user has,
	// by the name template of the clusters file: here strait itself, as a
	// user would give Submariner's clusterset.local names. The lab creates
	// the MCS ServiceExports (export: true) but, unlike the strait tool,
	// no AccessPolicy: that is the user's, so the test allows everything
	// first, as a user of another interconnect would have done.
	t.Run("InstalledTool", func(t *testing.T) {
		allow := "apiVersion: strait.dev/v1alpha1\nkind: AccessPolicy\nmetadata: {name: test-allow-all}\nspec: {priority: 100, action: allow}\n"
		for _, c := range []string{"a", "b"} {
			if out, err := p.Kubectl(c, allow, "apply", "-f", "-"); err != nil {
				t.Fatalf("cluster %s: apply AccessPolicy: %v: %s", c, err, out)
			}
			t.Cleanup(func() { _, _ = p.Kubectl(c, "", "delete", "accesspolicy", "test-allow-all", "--ignore-not-found") })
		}
		installed := write("clusters-installed.yaml", fmt.Sprintf("clusters:\n  a: {kubeconfig: %s}\n  b: {kubeconfig: %s}\ninstalled: \"{service}.{namespace}.svc.clusterset.local.\"\nexport: true\n", p.Kubeconfig["a"], p.Kubeconfig["b"]))
		dir := filepath.Join(tmp, "installed")
		cmd, log := labRun(t, p, bin, tmp, exp, "--clusters", installed, "--tools", "installed", "--out", dir)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("run with the installed tool: %v\n%s", err, log)
		}
		csvs, _ := filepath.Glob(filepath.Join(dir, "kube-test-*", "raw", "lcl-installed-echo-1KB-r1.csv"))
		if len(csvs) != 1 {
			t.Fatalf("the installed tool's keep-alive CSV: %v\nrun said:\n%s", csvs, log)
		}
		requireAllOK(t, csvs[0], 20)
		md, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(csvs[0])), "metadata.json"))
		if err != nil || !strings.Contains(string(md), "installed: {service}.{namespace}.svc.clusterset.local.") {
			t.Errorf("metadata.json does not name the installed tool's template (%v)", err)
		}
		if left := p.leftovers(t); left != "" {
			t.Fatalf("left after the run: %s", left)
		}
	})

	t.Run("Emulated", func(t *testing.T) {
		if runDir == "" {
			t.Skip("no finished unimpaired run to compare with")
		}
		// The address each cluster's node masquerades pod traffic to (its
		// address on the link, the next hop the other node routes it by),
		// which the API does not report: the run must find it itself
		// (the clusters file has no remote:) and impair the replies to it.
		remote := map[string]string{}
		for c, other := range map[string]string{"a": "b", "b": "a"} {
			route := strings.Fields(testenv.Run(t, "ip", "-n", p.nodeNetns(other), "route", "get", p.Addr[c]))
			for i, f := range route {
				if f == "via" && i+1 < len(route) {
					remote[c] = route[i+1]
				}
			}
			if remote[c] == "" {
				t.Fatalf("%s: no next hop toward %s: %v", other, p.Addr[c], route)
			}
		}
		// LAN 2 ms, WAN 5 ms: the path is 9 ms each way (scenario.Path), a
		// round trip 18 ms longer than lcl's.
		const added = 18 * time.Millisecond
		emuExp := write("experiment-emu.yaml", strings.Replace(experiment, "scenarios: [lcl]",
			"define-scenarios: [{name: d9, lan: {delay: 2ms}, wan: {delay: 5ms}}]\nscenarios: [d9]", 1))
		// Ctrl-C once the emulation is in place (its programs attached
		// on both nodes, its DaemonSets up): the run must take all of it
		// away, and --resume finishes the run.
		emuOut := filepath.Join(tmp, "results-emu")
		cmd, log := labRun(t, p, bin, tmp, emuExp, "--clusters", clusters, "--out", emuOut, "--tools", "direct")
		eventually(t, "the emulation's programs on both nodes", func() error {
			if !testenv.ProcessAlive(cmd.Process.Pid) {
				_ = cmd.Wait()
				t.Fatalf("the run ended before its emulation was seen in place:\n%s", log)
			}
			for _, c := range []string{"a", "b"} {
				if len(testenv.TCXLinks(t, p.nodeNetns(c))) == 0 {
					return fmt.Errorf("none on %s's node yet; run says: %s", c, log)
				}
			}
			return nil
		})
		for _, c := range []string{"a", "b"} {
			if ds := p.Must(t, c, "", "-n", linkemu.Namespace, "get", "daemonsets", "-l", linkemu.LabelComponent+"=linkemu", "-o", "name"); strings.TrimSpace(ds) == "" {
				t.Fatalf("cluster %s: no emulation DaemonSet while its programs are attached", c)
			}
		}
		interrupt(t, cmd, log)
		if left := p.leftovers(t); left != "" {
			t.Fatalf("left after Ctrl-C of an emulated unit: %s\nrun said:\n%s", left, log)
		}
		dirs, _ := filepath.Glob(filepath.Join(emuOut, "kube-test-*"))
		if len(dirs) != 1 {
			t.Fatalf("run directories %v, want the interrupted one", dirs)
		}
		cmd, log = labRun(t, p, bin, tmp, emuExp, "--clusters", clusters, "--resume", dirs[0], "--tools", "direct")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("resumed emulated run: %v\n%s", err, log)
		}
		median := func(path string) time.Duration {
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			samples, err := load.ReadCSV(f)
			if err != nil {
				t.Fatal(err)
			}
			var d []time.Duration
			for _, s := range samples {
				if s.OK() {
					d = append(d, s.Total)
				}
			}
			if len(d) < 10 {
				t.Fatalf("%s: %d answered requests", path, len(d))
			}
			slices.Sort(d)
			return d[len(d)/2]
		}
		base := median(filepath.Join(runDir, "raw", "lcl-direct-echo-1KB-r1.csv"))
		got := median(filepath.Join(dirs[0], "raw", "d9-direct-echo-1KB-r1.csv"))
		t.Logf("median echo: lcl %v, d9 %v (load %s)", base, got, loadavg())
		// Loose: at least 0.9 of the added round trip (the emulation
		// impairs both directions, including replies to the masquerade
		// address); at most 5× (a loaded host adds, it never removes).
		if got-base < added*9/10 || got-base > 5*added {
			t.Errorf("d9 moved the median echo by %v (lcl %v, d9 %v), want about %v", got-base, base, got, added)
		}
		b, err := os.ReadFile(filepath.Join(dirs[0], "metadata.json"))
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			Clusters kube.Metadata `json:"clusters"`
		}
		if err := json.Unmarshal(b, &md); err != nil {
			t.Fatal(err)
		}
		for c, want := range remote {
			src := md.Clusters.Clusters[c].Source
			if src == nil || !slices.Contains(src.Addresses, want) {
				t.Errorf("cluster %s: source %+v, want %s (its node's address on the link)", c, src, want)
			}
		}
		clustersJSON, _ := json.MarshalIndent(md.Clusters, "", "  ")
		t.Logf("metadata.json clusters: %s", clustersJSON)
		if len(md.Clusters.Emulation) != 1 {
			t.Errorf("metadata emulation %+v: want the unit's", md.Clusters.Emulation)
		}
		for unit, e := range md.Clusters.Emulation {
			if !strings.HasPrefix(e.Params, "delay 9ms") || !slices.Contains(e.Remote["a"], remote["b"]+"/32") || !slices.Contains(e.Remote["b"], remote["a"]+"/32") {
				t.Errorf("unit %s: emulation %+v: want delay 9ms toward each other's masquerade address", unit, e)
			}
		}
		// The agents' logs, with the userspace emulator's counters of
		// the echoes (this host has no netem), kept as the namespace lab
		// keeps its emulator's.
		logs, _ := filepath.Glob(filepath.Join(dirs[0], "logs", "*-emulator.log"))
		if len(logs) != 1 {
			t.Fatalf("emulator logs %v, want the unit's", logs)
		}
		if b, err := os.ReadFile(logs[0]); err != nil || !strings.Contains(string(b), "# cluster a, node ") || !strings.Contains(string(b), "# cluster b, node ") ||
			!regexp.MustCompile(`"link counters".*packets_in=[1-9]`).Match(b) {
			t.Errorf("%s: %v; want both clusters' agents' logs with link counters of packets:\n%s", logs[0], err, b)
		}
		raw, err := os.ReadFile(filepath.Join(dirs[0], "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		page := html.UnescapeString(string(raw))
		for _, want := range []string{"delay 9ms", remote["a"] + " (seen by cluster b's pod load:", remote["b"] + " (seen by cluster a's pod server-", remote["a"] + "/32"} {
			if !strings.Contains(page, want) {
				t.Errorf("report.html does not show %q", want)
			}
		}
		if left := p.leftovers(t); left != "" {
			t.Fatalf("left after the emulated run: %s", left)
		}
	})

	t.Run("Report", func(t *testing.T) {
		if runDir == "" {
			t.Skip("no finished run")
		}
		// The page a browser renders, as the namespace lab's report tests
		// check it.
		dom := string(testenv.RunChromium(t, testenv.Chromium(t), "--dump-dom", "file://"+filepath.Join(runDir, "report.html")))
		for _, want := range []string{"strait lab report: kube-test", "echo-newconn", "<svg"} {
			if !strings.Contains(dom, want) {
				t.Errorf("the rendered report has no %q", want)
			}
		}
	})

	t.Run("NamespaceDeleted", func(t *testing.T) {
		cmd, log := labRun(t, p, bin, tmp, exp, "--clusters", clusters, "--out", out, "--tools", "direct")
		var ns string
		eventually(t, "the unit's namespace in b", func() error {
			if ns = unitNS("b"); ns == "" {
				return fmt.Errorf("none yet; run says: %s", log)
			}
			return nil
		})
		p.Must(t, "b", "", "delete", "namespace", ns, "--wait=false")
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("a run whose namespace was deleted succeeded:\n%s", log)
			}
		case <-time.After(patience):
			_ = cmd.Process.Kill()
			t.Fatalf("the run did not end %v after its namespace was deleted:\n%s", patience, log)
		}
		if !strings.Contains(log.String(), ns) {
			t.Errorf("the error does not name namespace %s:\n%s", ns, log)
		}
		t.Logf("the run said:\n%s", log)
		if left := p.leftovers(t); left != "" {
			t.Fatalf("left after the run failed: %s", left)
		}
		// --resume finishes it (the same overrides: a resumed run must
		// be the same experiment).
		dirs, _ := filepath.Glob(filepath.Join(out, "kube-test-*"))
		var failed string
		for _, d := range dirs {
			if d != runDir {
				failed = d
			}
		}
		if len(dirs) != 2 || failed == "" {
			t.Fatalf("run directories %v: want the finished one and the failed one", dirs)
		}
		cmd, log = labRun(t, p, bin, tmp, exp, "--clusters", clusters, "--resume", failed, "--tools", "direct")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("resumed run: %v\n%s", err, log)
		}
		if _, err := os.Stat(filepath.Join(failed, "raw", "lcl-direct-echo-1KB-r1.csv")); err != nil {
			t.Errorf("the resumed run measured nothing: %v\n%s", err, log)
		}
		if left := p.leftovers(t); left != "" {
			t.Fatalf("left after the resumed run: %s", left)
		}
	})

	t.Run("NeverReady", func(t *testing.T) {
		// An image no node has and no registry serves: the kubelet
		// reports ErrImagePull at once, and the run must say so before
		// measuring anything.
		bad := write("clusters-bad-image.yaml", fmt.Sprintf("clusters:\n  a: {kubeconfig: %s}\n  b: {kubeconfig: %s}\nimage: localhost/strait-lab/absent:1\n", p.Kubeconfig["a"], p.Kubeconfig["b"]))
		cmd, log := labRun(t, p, bin, tmp, exp, "--clusters", bad, "--out", out, "--tools", "direct")
		if err := cmd.Wait(); err == nil {
			t.Fatalf("a run whose pods cannot start succeeded:\n%s", log)
		}
		for _, want := range []string{"cluster a: namespace strait-lab-", "pod server-", "ErrImagePull"} {
			if !strings.Contains(log.String(), want) && !(want == "ErrImagePull" && strings.Contains(log.String(), "ImagePullBackOff")) {
				t.Errorf("the error does not say %q:\n%s", want, log)
			}
		}
		t.Logf("the run said:\n%s", log)
		if left := p.leftovers(t); left != "" {
			t.Fatalf("left after the run failed: %s", left)
		}
	})

	t.Run("Unschedulable", func(t *testing.T) {
		// No node of a takes the workloads (a taint they do not
		// tolerate): the run must fail with the scheduler's reason,
		// naming the Deployment, once the scheduler has refused the
		// pod for podwait's grace, not at the pods' 5-minute deadline.
		const taint = "strait.dev/test-unschedulable=yes:NoSchedule"
		p.Must(t, "a", "", "taint", "node", "a-n1", taint)
		defer p.Must(t, "a", "", "taint", "node", "a-n1", taint+"-")
		cmd, log := labRun(t, p, bin, tmp, exp, "--clusters", clusters, "--out", filepath.Join(tmp, "unschedulable"), "--tools", "direct")
		if err := cmd.Wait(); err == nil {
			t.Fatalf("a run whose pods cannot be scheduled succeeded:\n%s", log)
		}
		for _, want := range []string{"cluster a: namespace strait-lab-", "Deployment server: pod server-", "unschedulable for", "untolerated taint", "strait.dev/test-unschedulable"} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("the error does not say %q:\n%s", want, log)
			}
		}
		if strings.Contains(log.String(), "not ready after") {
			t.Errorf("the run failed at the pods' deadline, not on the scheduler's refusal:\n%s", log)
		}
		t.Logf("the run said:\n%s", log)
		if left := p.leftovers(t); left != "" {
			t.Fatalf("left after the run failed: %s", left)
		}
	})

	t.Run("Down", func(t *testing.T) {
		// A crashed run's leftovers: a labelled namespace in each cluster.
		for _, c := range []string{"a", "b"} {
			p.Must(t, c, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: strait-lab-crashed, labels: {%s: %s, %s: crashed}}\n",
				kube.ManagedByLabel, kube.ManagedBy, kube.UnitLabel), "apply", "-f", "-")
		}
		cmd := exec.Command("ip", "netns", "exec", p.netns(), bin, "lab", "down", "--clusters", clusters)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("strait lab down --clusters: %v\n%s", err, out)
		}
		if left := p.leftovers(t); left != "" {
			t.Fatalf("left after strait lab down --clusters: %s", left)
		}
	})
	t.Logf("total: %v (load %s)", time.Since(start).Round(time.Second), loadavg())
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// Package e2e tests strait on Kubernetes end to end: two clusters, each a
// real API server with a `strait controller` process, gateways in network
// namespaces, a real `strait broker`, and curl from cluster b reaching an
// echo server in cluster a by its clusterset.local name.
package e2e

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcs "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/k8s/api"
	"github.com/strait-net/strait/k8s/k8stest"
	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/topology"
)

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
	patience     = 60 * time.Second // hang detector, not a performance bound
	clustersetIP = "10.77.0.0/24"
	// serviceIP is the echo Service's cluster IP in cluster a (the API
	// server's service range is 10.0.0.0/24); the server node has it as
	// an address, standing in for kube-proxy.
	serviceIP = "10.0.0.80"
	echoPort  = 8080
	ns        = "demo"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// staticBinary builds cmd/strait with CGO_ENABLED=0, as the Dockerfile
// does; the end-to-end test runs this very binary.
func staticBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "strait-k8s-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "strait")
		// -trimpath as scripts/image.sh builds it: the two share the
		// compile cache, which halves a cold TestDeployInPods.
		cmd := exec.Command("go", "build", "-trimpath", "-o", binPath, "./cmd/strait")
		cmd.Dir = k8stest.Root()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("CGO_ENABLED=0 go build ./cmd/strait: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// TestStaticBinary checks what the Dockerfile relies on: CGO_ENABLED=0
// yields a static executable (no interpreter, no shared libraries) that
// runs on a distroless/static image.
func TestStaticBinary(t *testing.T) {
	bin := staticBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("binary has a program interpreter: dynamically linked")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("binary needs shared libraries %v", libs)
	}
	if out, err := exec.Command(bin, "controller", "--help").CombinedOutput(); err != nil {
		t.Errorf("static binary does not run: %v\n%s", err, out)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	return testenv.Run(t, name, args...)
}

func write(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	return path
}

// routeVia adds a route to dst in netns along the path netns takes to
// towards (the lab routes between node addresses only).
func routeVia(t *testing.T, netns, dst, towards string) {
	t.Helper()
	f := strings.Fields(run(t, "ip", "-n", netns, "-o", "route", "get", towards))
	args := []string{"-n", netns, "route", "add", dst}
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "via" || f[i] == "dev" {
			args = append(args, f[i], f[i+1])
		}
	}
	run(t, "ip", args...)
}

// eventually waits for f to succeed; what names the step, in the failure
// and in the log line that says how long it took (so a failure shows how
// far the test got and how slow the steps before it were).
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(patience)
	for {
		err := f()
		if err == nil {
			t.Logf("%s: after %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, patience, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestTwoClusters(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	bin := staticBinary(t)
	// Short: unix socket paths must fit in 108 bytes.
	tmp, err := os.MkdirTemp("", testenv.UniqueName("sk8s"))
	if err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })

	// Two API servers, started side by side: cluster a's, then b's.
	clusters := k8stest.APIServers(t, 2)
	ka, kb := clusters[0], clusters[1]

	// The lab: one gateway node per cluster, a's echo server, b's client.
	tp, err := topology.Parse([]byte("name: " + testenv.UniqueName("k") + "\n" + topo))
	if err != nil {
		t.Fatalf("lab topology: %v", err)
	}
	plan, err := tp.Plan()
	if err != nil {
		t.Fatalf("lab plan: %v", err)
	}
	opts := lab.Options{Binary: bin, StateDir: t.TempDir()}
	l, err := lab.Up(context.Background(), plan, opts)
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	t.Cleanup(func() {
		if err := lab.Down(context.Background(), plan.Name, opts); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	node := func(id string) *topology.PlanNode {
		n, err := l.Node(id)
		if err != nil {
			t.Fatalf("lab node %s: %v", id, err)
		}
		return n
	}
	agw, server, bgw, clientNode := node("a/gw"), node("a/server"), node("b/gw"), node("b/client")

	// Cluster a: the Service's cluster IP lives on the server node.
	run(t, "ip", "-n", server.Netns, "addr", "add", serviceIP+"/32", "dev", "lo")
	routeVia(t, agw.Netns, serviceIP+"/32", server.Addr.String())
	// Cluster b: b's gateway listens on clusterset IPs (the whole range is
	// local there) and the client routes them to it.
	run(t, "ip", "-n", bgw.Netns, "route", "add", "local", clustersetIP, "dev", "lo")
	routeVia(t, clientNode.Netns, clustersetIP, bgw.Addr.String())
	// b's client resolves through strait's DNS on b's gateway: `ip netns
	// exec` bind-mounts /etc/netns/NAME/resolv.conf over /etc/resolv.conf.
	resolvDir := filepath.Join("/etc/netns", clientNode.Netns)
	if err := os.MkdirAll(resolvDir, 0o755); err != nil {
		t.Fatalf("client's resolv.conf: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(resolvDir) })
	write(t, filepath.Join(resolvDir, "resolv.conf"), "nameserver "+bgw.Addr.String()+"\n")

	// Identities and the broker (on the host's loopback, where the
	// controllers run).
	fab := filepath.Join(tmp, "fabric")
	for _, args := range [][]string{
		{"fabric", "init", "--dir", fab, "--clusterset", "cs"},
		{"fabric", "issue", "a", "--dir", fab},
		{"fabric", "issue", "b", "--dir", fab},
		{"fabric", "issue", "--broker", "broker1", "--dir", fab},
	} {
		run(t, bin, args...)
	}
	brokerAddr := testenv.FreeAddr(t)
	bconf := write(t, filepath.Join(tmp, "broker.yaml"), fmt.Sprintf("id: broker1\nidentity: {dir: %s}\nlisten: %s\nstore: {path: %s}\n",
		fab, brokerAddr, filepath.Join(tmp, "broker.db")))
	testenv.Start(t, bin, "broker", "--config", bconf)

	// Echo in cluster a.
	testenv.Start(t, "ip", "netns", "exec", server.Netns, bin, "app", "echo", "--listen", "0.0.0.0:"+strconv.Itoa(echoPort))

	// Gateways, one per cluster, configured only by the controllers.
	gwWAN := map[string]string{}
	for _, g := range []*topology.PlanNode{agw, bgw} {
		wan := net.JoinHostPort(g.Addr.String(), "4443")
		gwWAN[g.Cluster] = wan
		extra := ""
		if g.Cluster == "b" {
			extra = "dns: " + net.JoinHostPort(g.Addr.String(), "53") + "\n"
		}
		conf := write(t, filepath.Join(tmp, g.Cluster+"-gw.yaml"), fmt.Sprintf("cluster: %s\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\n%s",
			g.Cluster, fab, wan, filepath.Join(tmp, g.Cluster+".sock"), filepath.Join(tmp, g.Cluster+"-state.json"), extra))
		testenv.Start(t, "ip", "netns", "exec", g.Netns, bin, "gateway", "--config", conf)
	}

	// Objects in each cluster: the namespace (MCS namespace sameness) and
	// a policy allowing everything (strait denies by default).
	for _, k := range []*k8stest.Cluster{ka, kb} {
		create(t, k.Client, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&api.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-all"}, Spec: catalog.AccessPolicySpec{Priority: 1000, Action: catalog.Allow}})
	}
	// Cluster a: the Service, its EndpointSlice (the echo process), the
	// ServiceExport.
	create(t, ka.Client,
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"}, Spec: corev1.ServiceSpec{
			ClusterIP: serviceIP, Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: echoPort}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo-1", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{server.Addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(echoPort))}}},
		&mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"}})

	// The controllers: real processes, admin kubeconfigs.
	for _, c := range []struct {
		k  *k8stest.Cluster
		gw *topology.PlanNode
	}{{ka, agw}, {kb, bgw}} {
		kc, err := c.k.Kubeconfig("admin-"+c.gw.Cluster, []string{"system:masters"}, tmp)
		if err != nil {
			t.Fatalf("kubeconfig for cluster %s's controller: %v", c.gw.Cluster, err)
		}
		testenv.Start(t, bin, "controller", "--cluster", c.gw.Cluster, "--kubeconfig", kc,
			"--broker", brokerAddr, "--identity", fab, "--clusterset-ips", clustersetIP,
			"--gateway-wan", gwWAN[c.gw.Cluster], "--gateway-ips", c.gw.Addr.String(),
			"--gateway-admin", filepath.Join(tmp, c.gw.Cluster+".sock"))
	}

	// a's export becomes Ready (published to the broker) …
	eventually(t, "export ready in a", func() error {
		var se mcs.ServiceExport
		if err := ka.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "echo"}, &se); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(se.Status.Conditions, string(mcs.ServiceExportConditionReady)) {
			return fmt.Errorf("conditions %+v", se.Status.Conditions)
		}
		return nil
	})
	// … b imports it with a clusterset IP …
	var ip string
	eventually(t, "import in b", func() error {
		var si mcs.ServiceImport
		if err := kb.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "echo"}, &si); err != nil {
			return err
		}
		if len(si.Spec.IPs) != 1 || len(si.Status.Clusters) != 1 || si.Status.Clusters[0].Cluster != "a" {
			return fmt.Errorf("spec %+v status %+v", si.Spec, si.Status)
		}
		ip = si.Spec.IPs[0]
		return nil
	})
	// … and a client in b reaches a's echo by name, through strait's DNS
	// and both gateways.
	name := "echo." + ns + ".svc.clusterset.local"
	var last string
	eventually(t, "curl "+name+" from b", func() error {
		out, err := exec.Command("ip", "netns", "exec", clientNode.Netns, "curl", "-sS", "--max-time", "5",
			"--data-binary", "hello from b", fmt.Sprintf("http://%s:%d/", name, echoPort)).CombinedOutput()
		last = string(out)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if !bytes.Equal(out, []byte("hello from b")) {
			return fmt.Errorf("echo returned %q", out)
		}
		return nil
	})
	t.Logf("curl %s (%s) from b: %q", name, ip, last)

	// Unexporting in a removes the import from b and its listener from b's
	// gateway: the name no longer resolves.
	if err := ka.Client.Delete(context.Background(), &mcs.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"}}); err != nil {
		t.Fatalf("unexport echo in a: %v", err)
	}
	eventually(t, "import gone from b", func() error {
		var si mcs.ServiceImport
		err := kb.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "echo"}, &si)
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		if err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	eventually(t, "name gone from b's DNS", func() error {
		out, err := exec.Command("ip", "netns", "exec", clientNode.Netns, "curl", "-sS", "--max-time", "5", fmt.Sprintf("http://%s:%d/", name, echoPort)).CombinedOutput()
		if err == nil {
			return fmt.Errorf("curl still succeeds: %s", out)
		}
		if !strings.Contains(string(out), "resolve") {
			return fmt.Errorf("curl fails, but not at name resolution: %s", out)
		}
		return nil
	})
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

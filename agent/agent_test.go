package agent

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/catalog"
	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestAllocatorStableAndDeterministic(t *testing.T) {
	pfx := netip.MustParsePrefix("10.96.0.0/29") // 6 usable addresses
	a, b := newAllocator(pfx), newAllocator(pfx)
	keys := []string{"default/a", "default/b", "x/c", "y/d"}
	for _, k := range keys {
		ia, err := a.get(k)
		if err != nil {
			t.Fatal(err)
		}
		ib, _ := b.get(k)
		if ia != ib {
			t.Fatalf("%s: %s on one cluster, %s on another", k, ia, ib)
		}
		if !pfx.Contains(ia) || ia == pfx.Addr() || ia == netip.MustParseAddr("10.96.0.7") {
			t.Fatalf("%s: %s is not a usable host address of %s", k, ia, pfx)
		}
		if again, _ := a.get(k); again != ia {
			t.Fatalf("%s moved from %s to %s", k, ia, again)
		}
	}
	// An address read back from the gateway stays with its import.
	c := newAllocator(pfx)
	c.reserve("default/b", netip.MustParseAddr("10.96.0.6"))
	if ip, _ := c.get("default/b"); ip.String() != "10.96.0.6" {
		t.Fatalf("reserved import got %s", ip)
	}
	for i := 0; i < 5; i++ {
		if _, err := c.get(fmt.Sprintf("fill/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.get("one/more"); err == nil || !strings.Contains(err.Error(), "full") {
		t.Fatalf("seventh import in a /29: %v, want a full-prefix error", err)
	}
	c.release("fill/0")
	if _, err := c.get("one/more"); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Cluster: "a", Identity: IdentityFiles{Dir: "/x"}, Brokers: []string{"127.0.0.1:4500"}, Gateway: "/run/a.sock"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(*Config)
	}{
		{"cluster", "cluster", func(c *Config) { c.Cluster = "A_" }},
		{"brokers", "brokers", func(c *Config) { c.Brokers = nil }},
		{"broker addr", "brokers[0]", func(c *Config) { c.Brokers = []string{"nohost"} }},
		{"no source", "gateway or exports", func(c *Config) { c.Gateway = "" }},
		{"two sources", "exclusive", func(c *Config) { c.Exports = "e.yaml" }},
		{"prefix", "import-prefix", func(c *Config) { c.ImportPrefix = "10.0.0.0" }},
		{"prefix v6", "IPv4", func(c *Config) { c.ImportPrefix = "fd00::/64" }},
		{"gateways", "gateways", func(c *Config) { c.Gateways = []string{"x"} }},
	} {
		c := ok
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

func write(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const allowAll = `apiVersion: strait.dev/v1alpha1
kind: AccessPolicy
metadata: {name: all}
spec: {priority: 100, action: allow}
`

func imports(t *testing.T, admin *gateway.AdminClient) map[string]*catalog.ServiceImport {
	t.Helper()
	rs, err := admin.List(string(catalog.KindServiceImport))
	if err != nil {
		return nil
	}
	out := map[string]*catalog.ServiceImport{}
	for _, r := range rs {
		imp := r.(*catalog.ServiceImport)
		out[imp.Metadata.Namespace+"/"+imp.Metadata.Name] = imp
	}
	return out
}

func echo(addr string) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post("http://"+addr+"/", "application/octet-stream", strings.NewReader("ping"))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Equal(b, []byte("ping")) {
		return fmt.Errorf("echo answered %d %q", resp.StatusCode, b)
	}
	return nil
}

// TestAgentsThroughBrokerOutage runs a broker, two clusters' gateways and
// agents, and an echo server, all as real processes on loopback. Cluster
// a exports echo; b's agent must import it into b's gateway, and traffic
// must flow. Then the broker dies: traffic keeps flowing on the last
// catalog, an export made meanwhile waits, and once the broker is back it
// arrives in b while the first import keeps its address.
func TestAgentsThroughBrokerOutage(t *testing.T) {
	bin := testenv.StraitBinary(t)
	dir := t.TempDir()
	if _, err := fabric.InitDir(dir, "t", 24*time.Hour, false); err != nil {
		t.Fatal(err)
	}
	if _, err := fabric.IssueBrokerFiles(dir, dir, "broker1", time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := fabric.IssueFiles(dir, dir, id, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	brokerAddr := testenv.FreeAddr(t)
	bconf := write(t, filepath.Join(dir, "broker.yaml"), fmt.Sprintf("id: broker1\nidentity: {dir: %s}\nlisten: %s\nstore: {path: %s}\n", dir, brokerAddr, filepath.Join(dir, "broker.db")))
	startBroker := func() *exec.Cmd { return testenv.Start(t, bin, "broker", "--config", bconf) }
	brokerCmd := startBroker()

	echoAddr := testenv.FreeAddr(t)
	testenv.Start(t, bin, "app", "echo", "--listen", echoAddr)
	admins := map[string]*gateway.AdminClient{}
	agentConf := map[string]string{}
	agentCmd := map[string]*exec.Cmd{}
	for i, c := range []string{"a", "b"} {
		sock := filepath.Join(dir, c+".sock")
		wan := testenv.FreeAddr(t)
		gconf := write(t, filepath.Join(dir, c+"-gw.yaml"), fmt.Sprintf("cluster: %s\nidentity: {dir: %s}\nlisten: %s\nadmin: %s\nstate: %s\n", c, dir, wan, sock, filepath.Join(dir, c+"-state.json")))
		testenv.Start(t, bin, "gateway", "--config", gconf)
		admins[c] = gateway.NewAdminClient(sock)
		eventually(t, "gateway "+c, func() bool { _, err := admins[c].Status(); return err == nil })
		if _, err := admins[c].Apply([]byte(allowAll)); err != nil {
			t.Fatal(err)
		}
		aconf := write(t, filepath.Join(dir, c+"-agent.yaml"), fmt.Sprintf("cluster: %s\nidentity: {dir: %s}\nbrokers: [%s]\ngateway: %s\ngateways: [%s]\nimport-prefix: 127.%d.%d.0/24\npoll: 20ms\n",
			c, dir, brokerAddr, sock, wan, 100+i, os.Getpid()%200))
		agentConf[c], agentCmd[c] = aconf, testenv.Start(t, bin, "agent", "--config", aconf)
	}
	export := func(name string) {
		t.Helper()
		doc := fmt.Sprintf("apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: %s, namespace: default}\nspec: {target: %q, ports: [{name: http, port: 8080}]}\n", name, echoAddr)
		if _, err := admins["a"].Apply([]byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	export("echo")
	var first *catalog.ServiceImport
	eventually(t, "b imports echo", func() bool { first = imports(t, admins["b"])["default/echo"]; return first != nil })
	if got := first.SourceClusters(); len(got) != 1 || got[0] != "a" || first.Metadata.Labels[ManagedByLabel] != ManagedByValue {
		t.Fatalf("import %+v: want clusters [a], managed by the agent", first)
	}
	importAddr := net.JoinHostPort(first.Spec.IPs[0], "8080")
	eventually(t, "echo through the import", func() bool { return echo(importAddr) == nil })

	// Every broker down.
	_ = brokerCmd.Process.Signal(syscall.SIGKILL)
	_, _ = brokerCmd.Process.Wait()
	if err := echo(importAddr); err != nil {
		t.Fatalf("traffic on the last known catalog: %v", err)
	}
	export("late")
	// Several agent poll intervals: a has read the new export by now and
	// is waiting for a broker.
	time.Sleep(300 * time.Millisecond)
	if imports(t, admins["b"])["default/late"] != nil {
		t.Fatal("an export reached b with no broker running")
	}

	startBroker()
	eventually(t, "b imports the export made during the outage", func() bool { return imports(t, admins["b"])["default/late"] != nil })
	again := imports(t, admins["b"])["default/echo"]
	if again == nil || again.Spec.IPs[0] != first.Spec.IPs[0] {
		t.Fatalf("echo's import after the outage: %+v, want it unchanged at %s", again, first.Spec.IPs[0])
	}
	if err := echo(importAddr); err != nil {
		t.Fatalf("traffic after the outage: %v", err)
	}
	late := imports(t, admins["b"])["default/late"]
	eventually(t, "echo through the late import", func() bool { return echo(net.JoinHostPort(late.Spec.IPs[0], "8080")) == nil })

	// A restarted agent keeps every import's address.
	_ = agentCmd["b"].Process.Signal(syscall.SIGKILL)
	_, _ = agentCmd["b"].Process.Wait()
	testenv.Start(t, bin, "agent", "--config", agentConf["b"])
	export("third")
	eventually(t, "b imports an export after its agent restarted", func() bool { return imports(t, admins["b"])["default/third"] != nil })
	after := imports(t, admins["b"])
	if after["default/echo"].Spec.IPs[0] != first.Spec.IPs[0] || after["default/late"].Spec.IPs[0] != late.Spec.IPs[0] {
		t.Fatalf("addresses after the agent restarted: echo %v late %v, want %s and %s",
			after["default/echo"].Spec.IPs, after["default/late"].Spec.IPs, first.Spec.IPs[0], late.Spec.IPs[0])
	}

	// An export's removal reaches b as a delta: its import goes, the
	// others stay (the importer recomputes only the keys that changed).
	gone := &catalog.ServiceExport{Metadata: catalog.ObjectMeta{Name: "third", Namespace: "default"}, Spec: catalog.ServiceExportSpec{Target: echoAddr}}
	if _, err := admins["a"].DeleteResources([]catalog.Resource{gone}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b drops the import of the removed export", func() bool { return imports(t, admins["b"])["default/third"] == nil })
	if left := imports(t, admins["b"]); left["default/echo"] == nil || left["default/late"] == nil {
		t.Fatalf("imports after removing third: %v, want echo and late kept", left)
	}
}

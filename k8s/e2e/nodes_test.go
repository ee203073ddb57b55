package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/k8s/k8stest"
)

// nodePatience bounds each wait on real nodes: pods start in seconds on an
// idle host but the suite shares 2 cores with everything else. A hang
// detector, not a performance bound.
const nodePatience = 5 * time.Minute

// k8sNodes is one run of scripts/k8s-nodes.sh: clusters with real nodes.
type k8sNodes struct {
	t      *testing.T
	script string
	name   string
	env    []string
	addr   map[string]string // cluster -> first node's address
}

// requireNodeHost skips t where this host cannot run Kubernetes nodes:
// what scripts/k8s-nodes.sh needs and scripts/setup.sh installs.
func requireNodeHost(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	for _, c := range []string{"containerd", "ctr", "runc", "buildah", "cc", "curl", "jq", "openssl", "nft", "findmnt"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("needs %s (scripts/setup.sh installs it)", c)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		t.Skip("needs the CNI plugins in /usr/lib/cni (scripts/setup.sh installs containernetworking-plugins)")
	}
}

func upNodes(t *testing.T, bin string, clusters ...string) *k8sNodes {
	t.Helper()
	k := &k8sNodes{t: t, script: filepath.Join(k8stest.Root(), "scripts", "k8s-nodes.sh"),
		name: testenv.UniqueName("k"), env: append(os.Environ(), "STRAIT="+bin), addr: map[string]string{}}
	start := time.Now()
	cmd := exec.Command(k.script, "up", k.name, "--clusters", strings.Join(clusters, ","))
	cmd.Env = k.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Cleanup(func() {
		cmd := exec.Command(k.script, "down", k.name)
		cmd.Env = k.env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("k8s-nodes.sh down %s: %v\n%s", k.name, err, out)
		}
	})
	if err != nil {
		t.Fatalf("k8s-nodes.sh up %s: %v\n%s", k.name, err, out.String())
	}
	t.Logf("k8s-nodes.sh up %s: %v", k.name, time.Since(start).Round(time.Second))
	for _, line := range strings.Split(out.String(), "\n") {
		// cluster C netns NS apiserver ADDR kubeconfig FILE
		if f := strings.Fields(line); len(f) == 8 && f[0] == "cluster" {
			k.addr[f[1]] = f[5]
		}
	}
	for _, c := range clusters {
		if k.addr[c] == "" {
			t.Fatalf("k8s-nodes.sh up printed no address for cluster %s:\n%s", c, out.String())
		}
	}
	return k
}

// kubectl runs kubectl on cluster c with stdin, returning its output.
func (k *k8sNodes) kubectl(c, stdin string, args ...string) (string, error) {
	cmd := exec.Command(k.script, append([]string{"kubectl", k.name, c}, args...)...)
	cmd.Env = k.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func (k *k8sNodes) must(c, stdin string, args ...string) string {
	k.t.Helper()
	out, err := k.kubectl(c, stdin, args...)
	if err != nil {
		k.t.Fatalf("cluster %s: %v", c, err)
	}
	return out
}

// waitNodes is eventually with room for pods to start on a loaded host.
func waitNodes(t *testing.T, what string, f func() error) {
	t.Helper()
	start := time.Now()
	for {
		err := f()
		if err == nil {
			t.Logf("%s: after %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > nodePatience {
			t.Fatalf("%s: still failing after %v: %v", what, nodePatience, err)
		}
		time.Sleep(time.Second)
	}
}

// TestDeployInPods is what a user does first, on real nodes: deploy/
// applied unchanged (an overlay per cluster sets only strait.env and the
// gateway's cluster, as the README's quickstart does), the controller and
// the gateways running as pods from the image scripts/image.sh builds, and a
// pod in cluster b reaching a Service exported from cluster a by its
// clusterset.local name through b's own CoreDNS; unexported, the name is
// gone from b.
func TestDeployInPods(t *testing.T) {
	requireNodeHost(t)
	bin := staticBinary(t)
	k := upNodes(t, bin, "a", "b")
	tmp := t.TempDir()

	// Identities; the broker runs on a's first node (both clusters reach
	// it over the lab).
	fab := filepath.Join(tmp, "fabric")
	for _, args := range [][]string{
		{"fabric", "init", "--dir", fab, "--clusterset", "cs"},
		{"fabric", "issue", "a", "--dir", fab},
		{"fabric", "issue", "b", "--dir", fab},
		{"fabric", "issue", "--broker", "broker1", "--dir", fab},
	} {
		run(t, bin, args...)
	}
	broker := k.addr["a"] + ":4500"
	bconf := write(t, filepath.Join(tmp, "broker.yaml"), fmt.Sprintf("id: broker1\nidentity: {dir: %s}\nlisten: %s\nstore: {path: %s}\n",
		fab, broker, filepath.Join(tmp, "broker.db")))
	testenv.Start(t, "ip", "netns", "exec", "st-"+k.name+"-a-n1", bin, "broker", "--config", bconf)

	deploy := filepath.Join(k8stest.Root(), "deploy")
	for _, c := range []string{"a", "b"} {
		// The overlay: deploy/ as it is, this cluster's settings.
		dir := filepath.Join(tmp, "overlay-"+c)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		rel, err := filepath.Rel(dir, deploy)
		if err != nil {
			t.Fatal(err)
		}
		addr := k.addr[c]
		write(t, filepath.Join(dir, "strait.env"), fmt.Sprintf("cluster=%s\nbroker=%s\ngateway-wan=%s:4443\ngateway-ips=%s\nclusterset-ips=10.255.0.0/16\n",
			c, broker, addr, addr))
		gw, err := os.ReadFile(filepath.Join(deploy, "config", "gateway.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, "gateway.yaml"), strings.Replace(string(gw), "cluster: a ", "cluster: "+c+" ", 1))
		write(t, filepath.Join(dir, "kustomization.yaml"), fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: strait-system
resources: [%s]
images: [{name: ghcr.io/strait-net/strait, newTag: lab}] # scripts/k8s-images.sh
configMapGenerator:
  - {name: strait-config, behavior: replace, envs: [strait.env]}
  - {name: strait-gateway, behavior: replace, files: [gateway.yaml]}
# One node: one gateway (they are one per node).
patches:
  - target: {kind: Deployment, name: strait-gateway}
    patch: '[{"op": "replace", "path": "/spec/replicas", "value": 1}]'
`, rel))
		k.must(c, "", "apply", "-k", dir)
		k.must(c, "", "-n", "strait-system", "create", "secret", "generic", "strait-identity",
			"--from-file="+filepath.Join(fab, "ca.crt"), "--from-file="+filepath.Join(fab, c+".crt"), "--from-file="+filepath.Join(fab, c+".key"))
		// strait denies by default; the namespace exists in both (MCS
		// namespace sameness).
		k.must(c, `apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: strait.dev/v1alpha1
kind: AccessPolicy
metadata: {name: allow-all}
spec: {priority: 1000, action: allow}
`, "apply", "-f", "-")
	}
	for _, c := range []string{"a", "b"} {
		for _, d := range []string{"strait-controller", "strait-gateway"} {
			waitNodes(t, c+": "+d+" pods ready", func() error {
				_, err := k.kubectl(c, "", "-n", "strait-system", "wait", "--for=condition=Ready", "--timeout=2s", "pod", "-l", "app.kubernetes.io/name="+d)
				return err
			})
		}
	}

	// Cluster a: an echo server in a pod (the lab's workload, from strait's
	// image), its Service, exported.
	k.must("a", `apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: demo}
spec:
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      containers:
        - name: echo
          image: ghcr.io/strait-net/strait:lab
          args: [app, echo, --listen, "0.0.0.0:8080"]
          ports: [{containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: demo}
spec:
  selector: {app: echo}
  ports: [{name: http, port: 8080}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: echo, namespace: demo}
`, "apply", "-f", "-")

	// Cluster b: clusterset.local in its CoreDNS, deploy/dns as the README
	// says (the strait-dns cluster IP written in, CoreDNS restarted).
	dnsIP := strings.TrimSpace(k.must("b", "", "-n", "strait-system", "get", "svc", "strait-dns", "-o", "jsonpath={.spec.clusterIP}"))
	dnsDir := filepath.Join(tmp, "dns")
	if err := os.MkdirAll(dnsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kustomization.yaml", "coredns-custom.yaml"} {
		b, err := os.ReadFile(filepath.Join(deploy, "dns", f))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dnsDir, f), strings.ReplaceAll(string(b), "STRAIT_DNS_IP", dnsIP))
	}
	k.must("b", "", "apply", "-k", dnsDir)
	k.must("b", "", "-n", "kube-system", "rollout", "restart", "deployment/coredns")
	waitNodes(t, "b: coredns restarted", func() error {
		_, err := k.kubectl("b", "", "-n", "kube-system", "rollout", "status", "--timeout=2s", "deployment/coredns")
		return err
	})

	// A pod in b: curl by name, retried until the export has reached b
	// (broker, import, gateway listener, DNS); its output is the echo.
	name := "echo.demo.svc.clusterset.local"
	curlImage := strings.TrimSpace(run(t, "sh", "-c", `curl --version | awk 'NR == 1 {print "localhost/strait-lab/curl:" $2}'`))
	k.must("b", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: client, namespace: demo}
spec:
  restartPolicy: Never
  containers:
    - name: curl
      image: %s
      args: [-sS, --retry, "1000", --retry-delay, "1", --retry-all-errors, --retry-max-time, "280", --max-time, "5",
             --data-binary, hello from a pod in b, "http://%s:8080/"]
`, curlImage, name), "apply", "-f", "-")
	waitNodes(t, "curl "+name+" from a pod in b", func() error {
		phase, err := k.kubectl("b", "", "-n", "demo", "get", "pod", "client", "-o", "jsonpath={.status.phase}")
		if err != nil {
			return err
		}
		switch phase {
		case "Succeeded":
			return nil
		case "Failed":
			logs, _ := k.kubectl("b", "", "-n", "demo", "logs", "client")
			t.Fatalf("curl pod failed: %s", logs)
		}
		return fmt.Errorf("pod phase %q", phase)
	})
	// The log holds curl's messages about attempts before the name
	// existed in b (stderr), then the echo: the body, with no newline.
	logs := k.must("b", "", "-n", "demo", "logs", "client")
	if lines := strings.Split(logs, "\n"); lines[len(lines)-1] != "hello from a pod in b" {
		t.Fatalf("curl %s from b: got %q, want the echo last", name, logs)
	}

	// Unexporting in a takes the name away in b: a new curl pod fails at
	// name resolution (MCS: the import goes, CoreDNS forwards to strait).
	k.must("a", "", "-n", "demo", "delete", "serviceexport", "echo")
	attempt := 0
	waitNodes(t, "name gone from b's CoreDNS", func() error {
		attempt++
		pod := fmt.Sprintf("gone-%d", attempt)
		k.must("b", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: demo}
spec:
  restartPolicy: Never
  containers:
    - name: curl
      image: %s
      args: [-sS, --max-time, "5", "http://%s:8080/"]
`, pod, curlImage, name), "apply", "-f", "-")
		var phase string
		for range 60 {
			phase, _ = k.kubectl("b", "", "-n", "demo", "get", "pod", pod, "-o", "jsonpath={.status.phase}")
			if phase == "Succeeded" || phase == "Failed" {
				break
			}
			time.Sleep(time.Second)
		}
		logs, _ := k.kubectl("b", "", "-n", "demo", "logs", pod)
		if phase != "Failed" || !strings.Contains(logs, "resolve") {
			return fmt.Errorf("pod %s: phase %s, output %q", pod, phase, logs)
		}
		return nil
	})

	// Nothing of strait's restarted on the way.
	for _, c := range []string{"a", "b"} {
		out := k.must(c, "", "-n", "strait-system", "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name}{" "}{range .status.containerStatuses[*]}{.name}={.restartCount}{" "}{end}{"\n"}{end}`)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			for _, f := range strings.Fields(line)[1:] {
				if !strings.HasSuffix(f, "=0") {
					t.Errorf("cluster %s: pod %s restarted (container=restarts %s)", c, strings.Fields(line)[0], f)
				}
			}
		}
	}

	// deploy/rbac.yaml is enough: no strait container was refused anything.
	for _, c := range []string{"a", "b"} {
		for _, sel := range []string{"app.kubernetes.io/name=strait-controller", "app.kubernetes.io/name=strait-gateway"} {
			logs := k.must(c, "", "-n", "strait-system", "logs", "-l", sel, "--all-containers", "--prefix", "--tail=-1")
			for _, line := range strings.Split(logs, "\n") {
				if strings.Contains(strings.ToLower(line), "forbidden") {
					t.Errorf("cluster %s: %s", c, line)
				}
			}
		}
	}
}

// Package k8snodes is the test harness for tests on clusters with real
// nodes from scripts/k8s-nodes.sh (docs/k8s-nodes.md): the host check,
// bring-up with teardown, kubectl and polling. It is a subpackage so that
// internal/testenv itself stays free of what only these tests need.
package k8snodes

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
)

// Nodes is one lab of scripts/k8s-nodes.sh: clusters with real nodes.
type Nodes struct {
	Script     string            // scripts/k8s-nodes.sh
	Name       string            // the lab's name, unique per bring-up
	Env        []string          // environment for every run of Script
	Addr       map[string]string // cluster -> its first node's address
	Netns      map[string]string // cluster -> its first node's network namespace
	Kubeconfig map[string]string // cluster -> its kubeconfig file
}

// Require skips t where this host cannot run Kubernetes nodes: not root,
// or without what scripts/k8s-nodes.sh needs (scripts/setup.sh installs
// it), or without one of the extra tools the test itself runs.
func Require(t testing.TB, extra ...string) {
	t.Helper()
	testenv.RequireRoot(t)
	tools := []string{"containerd", "ctr", "runc", "buildah", "cc", "curl", "jq", "openssl", "nft", "findmnt"}
	for _, c := range append(tools, extra...) {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("needs %s (scripts/setup.sh installs it)", c)
		}
	}
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		t.Skip("needs the CNI plugins in /usr/lib/cni (scripts/setup.sh installs containernetworking-plugins)")
	}
}

// script is scripts/k8s-nodes.sh of this checkout.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "k8s-nodes.sh")
}

func newNodes(name, bin string) *Nodes {
	env := os.Environ()
	if bin != "" {
		env = append(env, "STRAIT="+bin)
	}
	return &Nodes{Script: script(), Name: name, Env: env,
		Addr: map[string]string{}, Netns: map[string]string{}, Kubeconfig: map[string]string{}}
}

// Up brings up the clusters as a lab named prefix plus a random suffix and
// tears it down when t ends. bin, if not empty, is the strait binary the
// script puts in the nodes' image (its STRAIT variable).
func Up(t testing.TB, prefix, bin string, clusters ...string) *Nodes {
	t.Helper()
	n := newNodes(testenv.UniqueName(prefix), bin)
	start := time.Now()
	cmd := exec.Command(n.Script, "up", n.Name, "--clusters", strings.Join(clusters, ","))
	cmd.Env = n.Env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Cleanup(func() {
		cmd := exec.Command(n.Script, "down", n.Name)
		cmd.Env = n.Env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("k8s-nodes.sh down %s: %v\n%s", n.Name, err, out)
		}
	})
	if err != nil {
		t.Fatalf("k8s-nodes.sh up %s: %v\n%s", n.Name, err, out.String())
	}
	t.Logf("k8s-nodes.sh up %s: %v", n.Name, time.Since(start).Round(time.Second))
	n.parse(t, out.String(), clusters)
	return n
}

// Attach uses the running lab name (brought up by hand with
// `scripts/k8s-nodes.sh up`), which it leaves up: an iteration aid.
func Attach(t testing.TB, name string, clusters ...string) *Nodes {
	t.Helper()
	n := newNodes(name, "")
	cmd := exec.Command(n.Script, "env", n.Name)
	cmd.Env = n.Env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("k8s-nodes.sh env %s: %v\n%s", n.Name, err, out)
	}
	n.parse(t, string(out), clusters)
	return n
}

// parse reads the script's lines "cluster C netns NS apiserver ADDR
// kubeconfig FILE" and fails t if one of clusters has none.
func (n *Nodes) parse(t testing.TB, out string, clusters []string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 8 && f[0] == "cluster" {
			n.Netns[f[1]], n.Addr[f[1]], n.Kubeconfig[f[1]] = f[3], f[5], f[7]
		}
	}
	for _, c := range clusters {
		if n.Addr[c] == "" || n.Netns[c] == "" {
			t.Fatalf("k8s-nodes.sh printed no address for cluster %s:\n%s", c, out)
		}
	}
}

// Kubectl runs kubectl on cluster c with stdin, returning its output.
func (n *Nodes) Kubectl(c, stdin string, args ...string) (string, error) {
	cmd := exec.Command(n.Script, append([]string{"kubectl", n.Name, c}, args...)...)
	cmd.Env = n.Env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// Must is Kubectl that fails t (the test or subtest running it) on error.
func (n *Nodes) Must(t testing.TB, c, stdin string, args ...string) string {
	t.Helper()
	out, err := n.Kubectl(c, stdin, args...)
	if err != nil {
		t.Fatalf("cluster %s: %v", c, err)
	}
	return out
}

// Eventually calls f every interval until it succeeds and returns how long
// that took; it fails t once f still fails after patience, which bounds
// hangs on a loaded host and is no performance bound.
func Eventually(t testing.TB, what string, patience, every time.Duration, f func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := f()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > patience {
			t.Fatalf("%s: still failing after %v: %v", what, patience, err)
		}
		time.Sleep(every)
	}
}

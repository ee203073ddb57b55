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
	k := &k8sNodes{script: filepath.Join(k8stest.Root(), "scripts", "k8s-nodes.sh"),
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

// must is kubectl that fails t (the test or subtest running it) on error.
func (k *k8sNodes) must(t *testing.T, c, stdin string, args ...string) string {
	t.Helper()
	out, err := k.kubectl(c, stdin, args...)
	if err != nil {
		t.Fatalf("cluster %s: %v", c, err)
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

package nodeemu_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/kube/linkemu/nodeemu"
)

// capsChild makes the test binary, started again by TestNoPrivileges, the
// agent process under test instead of running the tests.
const capsChild = "STRAIT_NODEEMU_CAPS_CHILD"

// TestNoPrivileges runs the agent (Run, in a process of its own) without
// the capabilities a pod that is not privileged lacks, as setpriv drops
// them from its bounding and inheritable sets before exec, in a network
// namespace standing for the node: it must refuse before it touches
// anything, naming what it lacks (docs/lab-clusters-emulation.md, the
// "no privileges" row), and leave the namespace's devices, qdiscs and
// files as they were.
func TestNoPrivileges(t *testing.T) {
	if os.Getenv(capsChild) != "" {
		t.Skip("the agent process of TestNoPrivileges runs TestNoPrivilegesAgent")
	}
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	node := testenv.Netns(t, testenv.UniqueName("ne-caps-"))
	dev := testenv.UniqueName("nc")
	testenv.Run(t, "ip", "-n", node, "link", "add", dev+"a", "type", "veth", "peer", dev+"b")
	testenv.Run(t, "ip", "-n", node, "addr", "add", "10.78.0.1/24", "dev", dev+"a")
	testenv.Run(t, "ip", "-n", node, "link", "set", dev+"a", "up")
	testenv.Run(t, "ip", "-n", node, "link", "set", dev+"b", "up")
	state := func() string {
		return testenv.Run(t, "ip", "-n", node, "-o", "link", "show") + testenv.Run(t, "tc", "-n", node, "qdisc", "show")
	}
	before := state()
	for _, tc := range []struct {
		drop, want string
	}{
		{"-net_admin", "no privileges for link emulation: the process lacks CAP_NET_ADMIN (CapEff "},
		// CAP_BPF or CAP_SYS_ADMIN loads the programs: without both.
		{"-net_admin,-bpf,-sys_admin", "no privileges for link emulation: the process lacks CAP_NET_ADMIN and CAP_BPF (or CAP_SYS_ADMIN) (CapEff "},
		{"-bpf,-sys_admin", "no privileges for link emulation: the process lacks CAP_BPF (or CAP_SYS_ADMIN) (CapEff "},
	} {
		t.Run(tc.drop, func(t *testing.T) {
			ready := filepath.Join(t.TempDir(), "ready")
			cmd := exec.Command("ip", "netns", "exec", node, "setpriv", "--inh-caps="+tc.drop, "--bounding-set="+tc.drop,
				os.Args[0], "-test.run=^TestNoPrivilegesAgent$", "-test.v")
			cmd.Env = append(os.Environ(), capsChild+"="+ready)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("agent process: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "agent: "+tc.want) {
				t.Errorf("the agent said:\n%s\nwant %q", out, tc.want)
			}
			if _, err := os.Stat(ready); err == nil {
				t.Errorf("the agent wrote %s without privileges", ready)
			}
		})
	}
	if after := state(); after != before {
		t.Errorf("the node changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestNoPrivilegesAgent is the agent process TestNoPrivileges starts: it
// runs Run toward the veth's subnet and prints its error.
func TestNoPrivilegesAgent(t *testing.T) {
	ready := os.Getenv(capsChild)
	if ready == "" {
		t.Skip("run by TestNoPrivileges")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := nodeemu.Run(ctx, nodeemu.Config{Run: testenv.UniqueName("caps-"), Remote: []netip.Prefix{netip.MustParsePrefix("10.78.0.0/24")},
		Params: emulation.Params{Delay: 5 * time.Millisecond}, Ready: ready})
	fmt.Printf("agent: %v\n", err)
}

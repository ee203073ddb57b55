package nexthop_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/nexthop"
	"github.com/strait-net/strait/lab/topology"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestParseBuckets(t *testing.T) {
	got, err := nexthop.ParseBuckets("id 10 index 0 idle_time 0 nhid 3 \nid 10 index 1 idle_time 1.5 nhid 2\n")
	if err != nil || len(got) != 2 || got[0] != 3 || got[1] != 2 {
		t.Fatalf("ParseBuckets = %v, %v", got, err)
	}
	if _, err := nexthop.ParseBuckets("garbage"); err == nil || !strings.Contains(err.Error(), `"garbage"`) {
		t.Errorf("garbage: %v", err)
	}
}

func FuzzParseBuckets(f *testing.F) {
	f.Add("id 10 index 0 idle_time 0 nhid 3")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := nexthop.ParseBuckets(s)
		if err == nil && m == nil {
			t.Fatal("nil map without error")
		}
	})
}

// TestWatcherDropsOnlyTheDeadGateway runs the watcher on a real client node
// with three gateways' health responders: killing one (-9) takes exactly
// its buckets away, the others keep theirs, and it returns when it answers
// again.
func TestWatcherDropsOnlyTheDeadGateway(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	tp, err := topology.Parse([]byte("name: " + testenv.UniqueName("n") + `
clusters:
  - name: b
    nodes: [{name: gw1, gateway: true}, {name: gw2, gateway: true}, {name: gw3, gateway: true}, {name: client}]
`))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := tp.Plan()
	if err != nil {
		t.Fatal(err)
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
	members, gws, err := nexthop.LabMembers(l.Plan, "b/client", 4444)
	if err != nil {
		t.Fatal(err)
	}
	start := func(netns string, argv ...string) *exec.Cmd {
		cmd := exec.Command("ip", append([]string{"netns", "exec", netns}, argv...)...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("%v:\n%s", argv, out.String())
			}
		})
		return cmd
	}
	responders := make([]*exec.Cmd, len(gws))
	for i, gw := range gws {
		responders[i] = start(gw.Netns, bin, "lab", "health-respond", "--listen", members[i].Health)
	}
	client, _ := l.Plan.Node("b/client")
	argv := []string{bin, "lab", "nexthop-watch", "--route", "10.96.0.50/32", "--src", client.Addr.String(), "--id", "100", "--buckets", "64", "--interval", "5ms"}
	for _, m := range members {
		argv = append(argv, "--member", fmt.Sprintf("%s,%s,%s", m.Via, m.Dev, m.Health))
	}
	start(client.Netns, argv...)

	group := func() (string, map[int]int) {
		show, _ := exec.Command("ip", "-n", client.Netns, "nexthop", "show", "id", "100").CombinedOutput()
		out, err := exec.Command("ip", "-n", client.Netns, "nexthop", "bucket", "show", "id", "100").CombinedOutput()
		if err != nil {
			return "", nil
		}
		b, err := nexthop.ParseBuckets(string(out))
		if err != nil {
			t.Fatal(err)
		}
		return string(show), b
	}
	waitGroup := func(want string) map[int]int {
		t.Helper()
		var last string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			show, b := group()
			last = show
			if strings.Contains(show, "group "+want+" ") && len(b) == 64 {
				return b
			}
		}
		t.Fatalf("group never became %s: %q", want, last)
		return nil
	}
	before := waitGroup("101/102/103")
	if route, _ := exec.Command("ip", "-n", client.Netns, "route", "show", "10.96.0.50/32").CombinedOutput(); !strings.Contains(string(route), "nhid 100") {
		t.Fatalf("route to the VIP: %q", route)
	}
	_ = responders[1].Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	after := waitGroup("101/103")
	t.Logf("group without gw2 %v after kill -9 (probe every 5ms; a killed responder answers with ICMP port unreachable)", time.Since(killed).Round(time.Millisecond))
	for i, nh := range before {
		switch {
		case nh == 102 && after[i] == 102:
			t.Errorf("bucket %d still on the dead gateway", i)
		case nh != 102 && after[i] != nh:
			t.Errorf("bucket %d moved from live %d to %d", i, nh, after[i])
		}
	}
	responders[1] = start(gws[1].Netns, bin, "lab", "health-respond", "--listen", members[1].Health)
	waitGroup("101/102/103")
}

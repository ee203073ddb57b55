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
	// Edges: nothing, numbers past int, a minus sign, invalid UTF-8, a
	// line cut short, the same bucket twice.
	f.Add("")
	f.Add("id 10 index 99999999999999999999 idle_time 0 nhid 3")
	f.Add("id 10 index -1 idle_time 0 nhid -3")
	f.Add("id 10 index 0 idle_time \xff\xfe nhid 3\n\xc3")
	f.Add("id 10 index 0 idle_time 0 nh")
	f.Add("index 0 nhid 1\nindex 0 nhid 2\n")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := nexthop.ParseBuckets(s)
		if err == nil && m == nil {
			t.Fatal("nil map without error")
		}
		for i, nh := range m {
			if i < 0 || nh < 0 {
				t.Fatalf("%q: bucket %d on nexthop %d", s, i, nh)
			}
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
	start := func(netns string, argv ...string) (*exec.Cmd, *testenv.Output) {
		cmd := exec.Command("ip", append([]string{"netns", "exec", netns}, argv...)...)
		out := &testenv.Output{}
		cmd.Stdout, cmd.Stderr = out, out
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
		return cmd, out
	}
	// respond starts gateway i's health responder and waits until it
	// listens. A watcher probing a responder that is still starting gets
	// ICMP port unreachable and drops that gateway; its return then
	// rebalances buckets among the live ones for a while, which this test
	// would take for a live gateway's buckets moving.
	respond := func(i int) *exec.Cmd {
		cmd, out := start(gws[i].Netns, bin, "lab", "health-respond", "--listen", members[i].Health)
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "listening on"); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("health responder of %s not listening after 30s: %q", gws[i].ID, out.String())
			}
		}
		return cmd
	}
	responders := make([]*exec.Cmd, len(gws))
	for i := range gws {
		responders[i] = respond(i)
	}
	client, _ := l.Plan.Node("b/client")
	argv := []string{bin, "lab", "nexthop-watch", "--route", "10.96.0.50/32", "--src", client.Addr.String(), "--id", "100", "--buckets", "64", "--interval", "5ms",
		// A busy host can stall a responder for a second; the kill is seen
		// through ICMP port unreachable, so silence may take 10s here and a
		// stall cannot drop a live gateway and move its buckets.
		"--misses", "2000"}
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
	// waitGroup waits until the group has exactly the members want (e.g.
	// "101/103") and the kernel has finished spreading the buckets over
	// them: after a membership change it moves idle buckets to an
	// under-served member only when their idle timer allows, and a
	// snapshot taken before that would see later moves between live
	// members.
	waitGroup := func(want string) map[int]int {
		t.Helper()
		var last string
		var lastB map[int]int
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			show, b := group()
			last, lastB = show, b
			if strings.Contains(show, "group "+want+" ") && strings.Contains(show, " unbalanced_time 0 ") && balanced(b, want, 64) {
				return b
			}
		}
		t.Fatalf("group never became %s with its 64 buckets balanced: %q, buckets per member %v", want, last, perMember(lastB))
		return nil
	}
	before := waitGroup("101/102/103")
	// The watcher adds the route after the group.
	var route []byte
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(string(route), "nhid 100"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("route to the VIP never used the group: %q", route)
		}
		route, _ = exec.Command("ip", "-n", client.Netns, "route", "show", "10.96.0.50/32").CombinedOutput()
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
	responders[1] = respond(1)
	waitGroup("101/102/103")
}

// balanced reports whether the n buckets are all owned by the members
// listed in want ("101/102/103") and each holds its share, n/len or one more.
func balanced(b map[int]int, want string, n int) bool {
	if len(b) != n {
		return false
	}
	ids := strings.Split(want, "/")
	per := perMember(b)
	if len(per) != len(ids) {
		return false
	}
	for _, id := range ids {
		var nh int
		if _, err := fmt.Sscan(id, &nh); err != nil {
			return false
		}
		if c := per[nh]; c < n/len(ids) || c > (n+len(ids)-1)/len(ids) {
			return false
		}
	}
	return true
}

// perMember counts buckets per nexthop ID.
func perMember(b map[int]int) map[int]int {
	per := map[int]int{}
	for _, nh := range b {
		per[nh]++
	}
	return per
}

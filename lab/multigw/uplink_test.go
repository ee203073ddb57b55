package multigw

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestUplinkDown: the uplink-down fault cuts a gateway node off the WAN —
// its uplink device is down and it has no route to the other cluster's
// gateway — and bringing it back up restores the device and every route
// the node had, so the node reaches the other gateway again.
func TestUplinkDown(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	e, err := Load("failover")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := e.Topology("x", 1).Plan()
	if err != nil {
		t.Fatal(err)
	}
	plan.Rename(testenv.UniqueName("ud"))
	ctx := context.Background()
	opts := lab.Options{Binary: bin, StateDir: t.TempDir()}
	if _, err := lab.Up(ctx, plan, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Down(context.Background(), plan.Name, opts); err != nil {
			t.Errorf("lab down: %v", err)
		}
	})
	gw, _ := plan.Node("a/gw1")
	other, _ := plan.Node("b/gw1")
	end, err := uplink(plan, gw.ID)
	if err != nil {
		t.Fatal(err)
	}
	routes := func() string { return testenv.Run(t, "ip", "-n", gw.Netns, "route") }
	reach := func() error {
		return exec.Command("ip", "-n", gw.Netns, "route", "get", other.Addr.String()).Run()
	}
	before := routes()
	if err := reach(); err != nil {
		t.Fatalf("a/gw1 has no route to b/gw1 before the fault: %v\n%s", err, before)
	}

	up, err := uplinkDown(ctx, plan, gw.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out := testenv.Run(t, "ip", "-n", gw.Netns, "-br", "link", "show", "dev", end.Device); !strings.Contains(out, "DOWN") {
		t.Errorf("uplink %s after the fault: %s, want DOWN", end.Device, out)
	}
	if err := reach(); err == nil {
		t.Errorf("a/gw1 still routes to b/gw1 with its uplink down:\n%s", routes())
	}

	if err := up(ctx); err != nil {
		t.Fatal(err)
	}
	if after := routes(); after != before {
		t.Errorf("routes after the uplink came back differ:\n--- before\n%s--- after\n%s", before, after)
	}
	if err := reach(); err != nil {
		t.Errorf("a/gw1 has no route to b/gw1 after the uplink came back: %v", err)
	}
	testenv.Run(t, "ip", "netns", "exec", gw.Netns, "ping", "-c", "1", "-W", "5", other.Addr.String())
}

package multigw

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteLoadPage renders the failover page for two victims and checks
// that each has its figures and a plot with a line per gateway plus the
// kill and restart markers.
func TestWriteLoadPage(t *testing.T) {
	gws := []string{"a/gw1", "a/gw2", "b/gw1", "b/gw2"}
	phase := func(victim string) *FailoverResult {
		r := &FailoverResult{Victim: victim, Rate: 2000, NewLost500: 7, Conns: 9, BrokenConns: 2, KillOffsetMs: 500, RestartOffsetMs: 1000, Gateways: gws}
		for at := 0.0; at <= 1500; at += 250 {
			r.GatewayLoad = append(r.GatewayLoad, LoadRow{AtMs: at, PerSec: []float64{500, 500, 400, 600}})
		}
		return r
	}
	dir := t.TempDir()
	if err := writeLoadPage(dir, 2, []*FailoverResult{phase("a/gw2"), phase("b/gw1")}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "load.html"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if n := strings.Count(page, "<svg"); n != 2 {
		t.Errorf("%d plots, want one per victim (2)", n)
	}
	for _, want := range []string{"kill -9 a/gw2", "kill -9 b/gw1", "7 lost in the 500 ms after the kill", "2 of 9 broke", "restart"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, g := range gws {
		if !strings.Contains(page, g+"<") && !strings.Contains(page, ">"+g) {
			t.Errorf("no legend entry for %s", g)
		}
	}
	if strings.Contains(page, "http://") && !strings.Contains(page, "http://www.w3.org/") {
		t.Error("page fetches something from the network")
	}
}

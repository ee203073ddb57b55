package broker

import (
	"path/filepath"
	"testing"
)

func TestPublishWatchInProcess(t *testing.T) {
	dir := pki(t, "b1", "a", "b")
	st, err := OpenBolt(filepath.Join(t.TempDir(), "s.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, dir, "b1", st)
	a, _ := startClient(t, dir, "a", srv.Addr().String())
	b, _ := startClient(t, dir, "b", srv.Addr().String())
	ctx := ctxT(t)
	rev, err := a.Publish(ctx, ClusterState{Exports: exportsN("svc", 3000), Gateways: []Gateway{{Addr: "10.0.0.1:4443", Healthy: true}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("published at %d", rev)
	eventually(t, "b sees a's exports", func() bool { return hasExport(b, "a", "default/svc2999") })
	cat, _ := b.Catalog()
	if n := len(cat.Clusters["a"].Exports); n != 3000 {
		t.Fatalf("b sees %d exports of a, want 3000", n)
	}
}

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

// TestPublishReplaces: Publish replaces the cluster's state (deletions
// arrive as deltas), an equal state changes nothing, and the watcher's
// updates carry exactly the changes.
func TestPublishReplaces(t *testing.T) {
	dir := pki(t, "b1", "a", "b")
	st, err := OpenBolt(filepath.Join(t.TempDir(), "s.db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, dir, "b1", st)
	a, _ := startClient(t, dir, "a", srv.Addr().String())
	b, rec := startClient(t, dir, "b", srv.Addr().String())
	ctx := ctxT(t)
	gw := []Gateway{{Addr: "10.0.0.1:4443", Healthy: true}}
	r1, err := a.Publish(ctx, ClusterState{Exports: exportsN("s", 3), Gateways: gw})
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.Publish(ctx, ClusterState{Exports: exportsN("s", 3), Gateways: gw})
	if err != nil || again != r1 {
		t.Fatalf("equal state published again: revision %d after %d (%v), want unchanged", again, r1, err)
	}
	gw2 := []Gateway{{Addr: "10.0.0.1:4443", Healthy: false}, {Addr: "10.0.0.2:4443", Healthy: true}}
	if _, err := a.Publish(ctx, ClusterState{Exports: exportsN("s", 2), Gateways: gw2}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b sees the deletion", func() bool { return !hasExport(b, "a", "default/s2") && hasExport(b, "a", "default/s1") })
	cat, _ := b.Catalog()
	if got := cat.Clusters["a"].Gateways; len(got) != 2 || got[0].Healthy || !got[1].Healthy {
		t.Fatalf("b sees a's gateways %+v, want %+v", got, gw2)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var deleted, gwChanges int
	for _, u := range rec.updates {
		for _, ch := range u.Changes {
			switch {
			case ch.Export != nil && ch.Deleted:
				deleted++
				if ch.Cluster != "a" || ch.Export.Key() != "default/s2" {
					t.Errorf("deletion %+v, want a's default/s2", ch)
				}
			case ch.Export == nil:
				gwChanges++
			}
		}
	}
	if deleted != 1 || gwChanges < 1 {
		t.Fatalf("%d deletions and %d gateway changes, want 1 and at least 1", deleted, gwChanges)
	}
}

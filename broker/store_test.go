package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// stores runs f on each Store implementation: the embedded bbolt store and
// a real etcd. history is the bolt store's history window; compact makes
// the store forget history up to rev.
type storeCase struct {
	st      Store
	compact func(t *testing.T, rev uint64)
}

func eachStore(t *testing.T, f func(t *testing.T, sc storeCase)) {
	t.Run("bolt", func(t *testing.T) {
		st, err := OpenBolt(filepath.Join(t.TempDir(), "s.db"), 5)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		f(t, storeCase{st: st, compact: func(t *testing.T, rev uint64) {
			// The bolt store compacts by window: commit past it.
			for i := 0; i < 6; i++ {
				if _, err := st.Commit(context.Background(), Cond{}, []Entry{{Key: "pad", Value: []byte(`{}`)}}, nil); err != nil {
					t.Fatal(err)
				}
			}
		}})
	})
	t.Run("etcd", func(t *testing.T) {
		url := startEtcd(t)
		st, err := OpenEtcd(context.Background(), EtcdConfig{Endpoints: []string{url}, Prefix: "/t/", MaxTxnOps: 4, LeaseTTL: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		f(t, storeCase{st: st, compact: func(t *testing.T, rev uint64) {
			if _, err := st.Commit(context.Background(), Cond{}, []Entry{{Key: "pad", Value: []byte(`{}`)}}, nil); err != nil {
				t.Fatal(err)
			}
			cur, _ := st.Revision(context.Background())
			if _, err := st.cli.Compact(context.Background(), int64(cur), clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
		}})
	})
}

func TestStoreContract(t *testing.T) {
	eachStore(t, func(t *testing.T, sc storeCase) {
		ctx := ctxT(t)
		st := sc.st
		r0, err := st.Revision(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Create under the condition "absent".
		r1, err := st.Commit(ctx, Cond{Key: "c/a/meta"}, []Entry{{Key: "c/a/meta", Value: []byte(`{}`)}, {Key: "c/a/e/x", Value: []byte(`1`)}}, nil)
		if err != nil || r1 <= r0 {
			t.Fatalf("first commit: rev %d after %d, %v", r1, r0, err)
		}
		// The same condition again fails and changes nothing.
		if _, err := st.Commit(ctx, Cond{Key: "c/a/meta"}, []Entry{{Key: "c/a/e/y", Value: []byte(`2`)}}, nil); !errors.Is(err, ErrConflict) {
			t.Fatalf("stale condition: %v, want ErrConflict", err)
		}
		// A big change (more than etcd's MaxTxnOps of 4 here), with a
		// delete of an absent key, on the right condition.
		var puts []Entry
		puts = append(puts, Entry{Key: "c/a/meta", Value: []byte(`{}`)})
		for i := 0; i < 9; i++ {
			puts = append(puts, Entry{Key: fmt.Sprintf("c/a/e/n%d", i), Value: []byte(fmt.Sprint(i))})
		}
		r2, err := st.Commit(ctx, Cond{Key: "c/a/meta", ModRev: r1}, puts, []string{"c/a/e/x", "c/a/e/absent"})
		if err != nil || r2 <= r1 {
			t.Fatalf("second commit: rev %d after %d, %v", r2, r1, err)
		}
		// Replaying the second commit's condition is rejected.
		if _, err := st.Commit(ctx, Cond{Key: "c/a/meta", ModRev: r1}, puts[:1], nil); !errors.Is(err, ErrConflict) {
			t.Fatalf("replayed base: %v, want ErrConflict", err)
		}
		entries, rs, err := st.Snapshot(ctx)
		if err != nil || rs != r2 {
			t.Fatalf("snapshot at %d, want %d: %v", rs, r2, err)
		}
		got := map[string]Entry{}
		for _, e := range entries {
			got[e.Key] = e
		}
		if _, ok := got["c/a/e/x"]; ok || len(got) != 10 {
			t.Fatalf("snapshot has %d entries (%v), want meta + n0..n8", len(got), got)
		}
		if got["c/a/meta"].ModRev != r2 {
			t.Fatalf("meta ModRev %d, want %d (the condition key's revision is the last part's)", got["c/a/meta"].ModRev, r2)
		}

		if e, ok, err := st.Get(ctx, "c/a/meta"); err != nil || !ok || e.ModRev != r2 || string(e.Value) != `{}` {
			t.Fatalf("get meta: %+v %v %v, want ModRev %d", e, ok, err, r2)
		}
		if _, ok, err := st.Get(ctx, "c/a/e/x"); err != nil || ok {
			t.Fatalf("get deleted: ok %v, %v", ok, err)
		}

		// Watch from r1 replays everything after it, in order, every
		// revision's events in one call, and then live changes.
		wctx, cancel := context.WithCancel(ctx)
		type batch struct {
			rev uint64
			evs []Entry
		}
		batches := make(chan batch, 100)
		done := make(chan error, 1)
		go func() {
			done <- st.Watch(wctx, r1, func(rev uint64, evs []Entry) error {
				batches <- batch{rev, evs}
				return nil
			})
		}()
		var last uint64
		seen := map[string]bool{}
		deleted := false
		for last < r2 {
			b := <-batches
			if b.rev <= last || b.rev <= r1 {
				t.Fatalf("watch revision %d after %d (from %d)", b.rev, last, r1)
			}
			for _, e := range b.evs {
				if e.ModRev != b.rev {
					t.Fatalf("event %s at %d in the batch of %d", e.Key, e.ModRev, b.rev)
				}
				if e.Value == nil {
					deleted = deleted || e.Key == "c/a/e/x"
					if e.Key == "c/a/e/absent" {
						t.Fatal("deleting an absent key made an event")
					}
				} else {
					seen[e.Key] = true
				}
			}
			last = b.rev
		}
		if len(seen) != 10 || !deleted {
			t.Fatalf("watch saw puts %v and deletion %v", seen, deleted)
		}
		r3, err := st.Commit(ctx, Cond{}, []Entry{{Key: "live", Value: []byte(`3`)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b := <-batches; b.rev != r3 || len(b.evs) != 1 || b.evs[0].Key != "live" {
			t.Fatalf("live event %+v, want live at %d", b, r3)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("watch ended with %v, want context.Canceled", err)
		}

		// Ephemeral entries go with their owner.
		stop, err := st.Ephemeral(ctx, "b/x", []byte(`{"addr":"a:1"}`))
		if err != nil {
			t.Fatal(err)
		}
		if !hasKey(t, st, "b/x") {
			t.Fatal("ephemeral entry missing")
		}
		stop()
		if hasKey(t, st, "b/x") {
			t.Fatal("ephemeral entry still there after stop")
		}

		// History compacted away: ErrCompacted, then a snapshot works.
		sc.compact(t, r3)
		err = st.Watch(ctx, r1, func(uint64, []Entry) error { return nil })
		if !errors.Is(err, ErrCompacted) {
			t.Fatalf("watch from compacted %d: %v, want ErrCompacted", r1, err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

func hasKey(t *testing.T, st Store, key string) bool {
	t.Helper()
	entries, _, err := st.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Key == key {
			return true
		}
	}
	return false
}

// An etcd lease ends with the process that holds it: a broker killed
// without stopping leaves no membership entry behind (after the TTL).
func TestEtcdEphemeralExpires(t *testing.T) {
	url := startEtcd(t)
	st, err := OpenEtcd(context.Background(), EtcdConfig{Endpoints: []string{url}, LeaseTTL: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Ephemeral(context.Background(), "b/gone", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	st.Close() // keepalives stop, as when the process dies
	other, err := OpenEtcd(context.Background(), EtcdConfig{Endpoints: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	eventually(t, "lease expiry", func() bool { return !hasKey(t, other, "b/gone") })
}

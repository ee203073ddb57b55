package ring

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// The property tests draw member sets from fixed seeds, so a failure
// reproduces; they log the worst case they saw, which is what the package
// documentation's claims rest on (go test -v -run Property).

func randomMembers(rng *rand.Rand, n int) []string {
	styles := []func(int) string{
		func(i int) string { return fmt.Sprintf("gw-%d", i) },
		func(i int) string { return fmt.Sprintf("gateway-%x.east.svc", rng.Uint32()) },
		func(i int) string { return fmt.Sprintf("10.0.%d.%d:443", i/256, i%256) },
	}
	style := styles[rng.IntN(len(styles))]
	seen := map[string]bool{}
	var out []string
	for i := 0; len(out) < n; i++ {
		name := style(i)
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

func mustNew(t testing.TB, members []string, opts Options) *Table {
	t.Helper()
	tb, err := New(members, opts)
	if err != nil {
		t.Fatalf("New(%d members): %v", len(members), err)
	}
	return tb
}

// owner names the member of a bucket, "" for none, so tables with different
// member lists compare.
func owner(t *Table, bucket int) string {
	if e := t.entry[bucket]; e != none {
		return t.members[e]
	}
	return ""
}

// movedFraction is the share of buckets whose member differs between a and
// b; keys are uniform over buckets, so it is the share of flows that move.
func movedFraction(a, b *Table) float64 {
	moved := 0
	for i := range a.entry {
		if owner(a, i) != owner(b, i) {
			moved++
		}
	}
	return float64(moved) / float64(len(a.entry))
}

func without(members []string, name string) []string {
	return slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == name })
}

func TestPropertyEvenness(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const keys = 200_000
	worstBuckets, worstKeys := 0.0, 0.0
	for trial := range 48 {
		n := 1 + trial%16
		members := randomMembers(rng, n)
		tb := mustNew(t, members, Options{Seed: rng.Uint64()})

		// Buckets: Maglev's round-robin gives every member ⌊M/N⌋ or ⌈M/N⌉.
		lo, hi := math.MaxInt, 0
		for _, m := range members {
			lo, hi = min(lo, tb.Buckets(m)), max(hi, tb.Buckets(m))
		}
		if hi-lo > 1 {
			t.Errorf("N=%d: bucket counts %d..%d differ by more than 1", n, lo, hi)
		}
		even := float64(tb.Size()) / float64(n)
		worstBuckets = max(worstBuckets, (float64(hi)-even)/even, (even-float64(lo))/even)

		// Keys: three kinds, random, sequential and 5-tuples differing only
		// in the source port, since real keys are rarely random.
		load := make([]int, n)
		src := netip.MustParseAddr("192.0.2.7")
		dst := netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), 443)
		for k := range keys {
			var key uint64
			switch trial % 3 {
			case 0:
				key = rng.Uint64()
			case 1:
				key = uint64(k)
			case 2:
				key = KeyOf(6, netip.AddrPortFrom(src, uint16(k)), netip.AddrPortFrom(dst.Addr(), uint16(k>>16)))
			}
			load[tb.LookupIndex(key)]++
		}
		want := float64(keys) / float64(n)
		for i, l := range load {
			dev := math.Abs(float64(l)-want) / want
			worstKeys = max(worstKeys, dev)
			if dev > 0.05 {
				t.Errorf("N=%d key kind %d: %s got %d keys, want %.0f ±5%%", n, trial%3, tb.members[i], l, want)
			}
		}
	}
	t.Logf("max deviation from even: buckets %.4f%%, keys (200k per table) %.2f%%", 100*worstBuckets, 100*worstKeys)
}

func TestPropertyWeights(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	worst := 0.0
	for trial := range 24 {
		n := 2 + trial%8
		members := randomMembers(rng, n)
		weights := map[string]int{}
		total := 0
		for _, m := range members {
			w := 1 + rng.IntN(10)
			weights[m] = w
			total += w
		}
		tb := mustNew(t, members, Options{Weights: weights, Seed: uint64(trial)})
		check := func(view *Table, what string, liveTotal int) {
			for _, m := range members {
				if view.Down(m) {
					continue
				}
				want := float64(view.Size()) * float64(weights[m]) / float64(liveTotal)
				dev := math.Abs(float64(view.Buckets(m))-want) / want
				worst = max(worst, dev)
				if dev > 0.05 {
					t.Errorf("%s: %s weight %d of %d has %d buckets, want %.0f ±5%%", what, m, weights[m], liveTotal, view.Buckets(m), want)
				}
			}
		}
		check(tb, "configured", total)
		dead := members[rng.IntN(n)]
		check(tb.WithDown(map[string]bool{dead: true}), "down", total-weights[dead])
	}
	t.Logf("weighted: max deviation from the weighted share %.2f%% (configured and one down)", 100*worst)
}

// TestPropertyDown checks the health rule on random walks of failures and
// recoveries: whenever one member changes state, the buckets that change are
// exactly the ones that member serves while it is alive, and a bucket whose
// configured owner is alive never moves.
func TestPropertyDown(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	worstExtra, worstLoad := 0.0, 0.0
	for trial := range 30 {
		n := 2 + trial%15
		members := randomMembers(rng, n)
		base := mustNew(t, members, Options{Seed: rng.Uint64()})
		down := map[string]bool{}
		cur := base
		for range 12 {
			x := members[rng.IntN(n)]
			if down[x] {
				delete(down, x)
			} else {
				down[x] = true
			}
			next := cur.WithDown(down)
			alive := next // the view in which x serves buckets
			if down[x] {
				alive = cur
			}
			for b := range base.entry {
				changed := owner(cur, b) != owner(next, b)
				if changed != (owner(alive, b) == x) {
					t.Fatalf("N=%d down=%v toggling %s: bucket %d %s→%s, x serves it alive: %v",
						n, down, x, b, owner(cur, b), owner(next, b), owner(alive, b) == x)
				}
				if o := owner(base, b); !down[o] && owner(next, b) != o {
					t.Fatalf("bucket %d of live %s moved to %s", b, o, owner(next, b))
				}
			}
			cur = next
		}

		// The first failure from the configured table: only the dead member's
		// flows move, at most 1/N + 2 % of them, and the heirs stay even.
		dead := members[rng.IntN(n)]
		one := base.WithDown(map[string]bool{dead: true})
		f := movedFraction(base, one)
		worstExtra = max(worstExtra, f-1/float64(n))
		if f > 1/float64(n)+0.02 {
			t.Errorf("N=%d: one down moved %.4f of flows, want ≤ 1/N+0.02 = %.4f", n, f, 1/float64(n)+0.02)
		}
		even := float64(base.Size()) / float64(n-1)
		for _, m := range members {
			if m == dead {
				continue
			}
			dev := math.Abs(float64(one.Buckets(m))-even) / even
			worstLoad = max(worstLoad, dev)
			if dev > 0.05 {
				t.Errorf("N=%d: after %s died %s has %d buckets, want %.0f ±5%%", n, dead, m, one.Buckets(m), even)
			}
		}
		// The same through Lookup, as a gateway sees it.
		for range 5000 {
			k := rng.Uint64()
			was, _ := base.Lookup(k)
			now, ok := one.Lookup(k)
			if !ok || now == dead || (was != dead && now != was) {
				t.Fatalf("N=%d, %s down: key %x went %s → %s", n, dead, k, was, now)
			}
		}
		if back := one.WithDown(nil); !slices.Equal(back.entry, base.entry) {
			t.Errorf("N=%d: restoring %s did not give back the configured table", n, dead)
		}
	}
	t.Logf("one down: moved fraction − 1/N ≤ %.5f (0 means only the dead member's flows); max heir deviation from even %.2f%%",
		worstExtra, 100*worstLoad)
}

// TestPropertyMembership measures Maglev rebuilds: removing a member from
// the configuration and adding one.
func TestPropertyMembership(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{2, 3, 4, 8, 12, 16} {
		worstRemove, worstCollateral, worstAdd := 0.0, 0.0, 0.0
		for range 5 {
			members := randomMembers(rng, n+1)
			opts := Options{Seed: rng.Uint64()}
			full := mustNew(t, members[:n], opts)

			gone := members[rng.IntN(n)]
			smaller := mustNew(t, without(members[:n], gone), opts)
			f := movedFraction(full, smaller)
			worstRemove = max(worstRemove, f)
			if f > 1/float64(n)+0.02 {
				t.Errorf("N=%d: removing %s moved %.4f, want ≤ %.4f", n, gone, f, 1/float64(n)+0.02)
			}
			collateral := 0
			for b := range full.entry {
				if o := owner(full, b); o != gone && owner(smaller, b) != o {
					collateral++
				}
			}
			worstCollateral = max(worstCollateral, float64(collateral)/float64(full.Size()))
			// Putting it back is a pure function of the configuration, so
			// every flow returns where it was.
			if again := mustNew(t, members[:n], opts); !slices.Equal(again.entry, full.entry) {
				t.Errorf("N=%d: re-adding %s did not restore the table", n, gone)
			}

			larger := mustNew(t, members, opts)
			f = movedFraction(full, larger)
			worstAdd = max(worstAdd, f)
			newShare := float64(larger.Buckets(members[n])) / float64(larger.Size())
			if f < newShare || f > 1/float64(n+1)+0.02 {
				t.Errorf("N=%d: adding %s moved %.4f, want %.4f..%.4f", n, members[n], f, newShare, 1/float64(n+1)+0.02)
			}
		}
		t.Logf("N=%2d: remove moves ≤ %.4f (1/N = %.4f; flows of live members moved ≤ %.4f); add moves ≤ %.4f (1/(N+1) = %.4f)",
			n, worstRemove, 1/float64(n), worstCollateral, worstAdd, 1/float64(n+1))
	}
}

func TestFlapping(t *testing.T) {
	members := randomMembers(rand.New(rand.NewPCG(9, 10)), 8)
	base := mustNew(t, members, Options{})
	other := map[string]bool{members[5]: true}
	cur := base.WithDown(other)
	start := slices.Clone(cur.entry)
	for i := range 100 {
		flapping := map[string]bool{members[5]: true, members[2]: i%3 != 2} // sometimes a no-op
		cur = cur.WithDown(flapping)
		cur = cur.WithDown(other)
	}
	if !slices.Equal(cur.entry, start) {
		t.Fatal("100 flaps changed the table")
	}
	if cur.WithDown(nil) != base {
		t.Fatal("no member down should give back the configured table itself")
	}
}

func TestAllDown(t *testing.T) {
	members := []string{"a", "b", "c"}
	tb := mustNew(t, members, Options{Size: 101})
	down := tb.WithDown(map[string]bool{"a": true, "b": true, "c": true})
	for k := range uint64(1000) {
		if m, ok := down.Lookup(k); ok || m != "" {
			t.Fatalf("Lookup(%d) = %q, %v with all members down, want \"\", false", k, m, ok)
		}
		if i := down.LookupIndex(k); i != -1 {
			t.Fatalf("LookupIndex(%d) = %d with all members down, want -1", k, i)
		}
	}
	for _, m := range members {
		if down.Buckets(m) != 0 || !down.Down(m) {
			t.Errorf("%s: Buckets %d, Down %v; want 0, true", m, down.Buckets(m), down.Down(m))
		}
	}
	if got := down.Members(); !slices.Equal(got, members) {
		t.Errorf("Members() = %v, want all configured members %v", got, members)
	}
	// One recovers: it takes everything, and alone.
	one := tb.WithDown(map[string]bool{"a": true, "b": true})
	if one.Buckets("c") != 101 {
		t.Errorf("with only c alive, c has %d of 101 buckets", one.Buckets("c"))
	}
}

func TestWithDownIgnoresNonMembersAndFalse(t *testing.T) {
	tb := mustNew(t, []string{"a", "b"}, Options{})
	if v := tb.WithDown(map[string]bool{"zz": true, "a": false}); v != tb {
		t.Error("down map with only non-members and false entries should return the configured table")
	}
	v := tb.WithDown(map[string]bool{"a": true})
	if w := v.WithDown(map[string]bool{"b": true}); w.Down("a") || !w.Down("b") {
		t.Error("WithDown must replace the dead set, not add to it")
	}
}

func TestNewErrors(t *testing.T) {
	many := make([]string, MaxMembers+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	heavy := map[string]int{}
	for _, m := range many[:200] {
		heavy[m] = MaxWeight
	}
	tests := []struct {
		name    string
		members []string
		opts    Options
		want    string
	}{
		{"duplicate", []string{"a", "b", "a"}, Options{}, `duplicate member "a"`},
		{"empty name", []string{"a", ""}, Options{}, "empty member name"},
		{"size not prime", []string{"a"}, Options{Size: 1000}, "size 1000 must be a prime"},
		{"size negative", []string{"a"}, Options{Size: -7}, "size -7 must be a prime"},
		{"size one", []string{"a"}, Options{Size: 1}, "size 1 must be a prime"},
		{"size too large", []string{"a"}, Options{Size: 16777259}, "must be a prime in 2..16777216"},
		{"more members than buckets", []string{"a", "b", "c"}, Options{Size: 2}, "size 2 is smaller than the total weight 3"},
		{"weights exceed buckets", []string{"a", "b"}, Options{Size: 5, Weights: map[string]int{"a": 5}}, "smaller than the total weight 6"},
		{"weight of non-member", []string{"a"}, Options{Weights: map[string]int{"b": 2}}, `"b" is not a member`},
		{"weight zero", []string{"a"}, Options{Weights: map[string]int{"a": 0}}, "weight 0, allowed 1..1000"},
		{"weight too large", []string{"a"}, Options{Weights: map[string]int{"a": 1001}}, "weight 1001"},
		{"too many members", many, Options{}, "65536 members, at most 65535"},
		{"default too large for weights", many[:200], Options{Weights: heavy}, "total weight 200000 needs more than 16777216 buckets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.members, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestNewEdges(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		tb := mustNew(t, nil, Options{})
		if _, ok := tb.Lookup(42); ok || tb.LookupIndex(42) != -1 || tb.Size() != DefaultSize {
			t.Error("an empty table must report no member for every key")
		}
		if tb.WithDown(map[string]bool{"a": true}) != tb {
			t.Error("WithDown on an empty table should be a no-op")
		}
	})
	t.Run("one bucket each", func(t *testing.T) {
		tb := mustNew(t, []string{"a", "b", "c", "d", "e", "f", "g"}, Options{Size: 7})
		for _, m := range tb.Members() {
			if tb.Buckets(m) != 1 {
				t.Errorf("%s has %d buckets, want 1", m, tb.Buckets(m))
			}
		}
	})
	t.Run("smallest table", func(t *testing.T) {
		tb := mustNew(t, []string{"a", "b"}, Options{Size: 2})
		if tb.Buckets("a") != 1 || tb.Buckets("b") != 1 {
			t.Error("size 2 with two members must give one bucket each")
		}
	})
	t.Run("default grows with weight", func(t *testing.T) {
		members := randomMembers(rand.New(rand.NewPCG(1, 1)), 1000)
		tb := mustNew(t, members, Options{})
		if tb.Size() != 100003 { // smallest prime ≥ 100 000
			t.Errorf("Size() = %d for 1000 members, want 100003", tb.Size())
		}
	})
	t.Run("input order", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 12))
		members := randomMembers(rng, 16)
		opts := Options{Seed: 99, Weights: map[string]int{members[3]: 3}}
		a := mustNew(t, members, opts)
		rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		b := mustNew(t, members, opts)
		if !slices.Equal(a.entry, b.entry) || !slices.Equal(a.members, b.members) {
			t.Error("the same members in another order built another table")
		}
		if slices.Equal(a.entry, mustNew(t, members, Options{Seed: 98, Weights: opts.Weights}).entry) {
			t.Error("a different seed built the same table")
		}
	})
	t.Run("caller's slice untouched", func(t *testing.T) {
		in := []string{"c", "a", "b"}
		mustNew(t, in, Options{})
		if !slices.Equal(in, []string{"c", "a", "b"}) {
			t.Errorf("New reordered its argument: %v", in)
		}
	})
}

// TestGolden pins the algorithm: gateways of one cluster running different
// strait versions must place flows alike, and a process must not bring its
// own randomness (map order, maphash seeds). A change here is a wire change.
func TestGolden(t *testing.T) {
	tb := mustNew(t, []string{"gw-c", "gw-a", "gw-b"}, Options{Seed: 7, Weights: map[string]int{"gw-b": 2}})
	down := tb.WithDown(map[string]bool{"gw-a": true})
	var sum, sumDown uint64
	for i := range tb.entry {
		sum = sum*31 + uint64(tb.entry[i])
		sumDown = sumDown*31 + uint64(down.entry[i])
	}
	key := KeyOf(6, netip.MustParseAddrPort("10.1.2.3:40000"), netip.MustParseAddrPort("[2001:db8::1]:443"))
	got := fmt.Sprintf("%x %x %x %d %d", sum, sumDown, key, tb.LookupIndex(key), tb.LookupIndex(12345))
	const want = "fc98f83db26713e8 d6e7c61be738178c d8f49a0a796156cd 0 1"
	if got != want {
		t.Errorf("golden = %q, want %q", got, want)
	}
}

func TestKeyOf(t *testing.T) {
	a := netip.MustParseAddrPort("192.0.2.1:5000")
	b := netip.MustParseAddrPort("198.51.100.2:443")
	mapped := netip.AddrPortFrom(netip.AddrFrom16(a.Addr().As16()), a.Port())
	if KeyOf(6, a, b) != KeyOf(6, mapped, b) {
		t.Error("an IPv4 address and its IPv4-mapped form gave different keys")
	}
	distinct := map[uint64]string{}
	for name, k := range map[string]uint64{
		"base":          KeyOf(6, a, b),
		"swapped":       KeyOf(6, b, a),
		"udp":           KeyOf(17, a, b),
		"src port":      KeyOf(6, netip.AddrPortFrom(a.Addr(), 5001), b),
		"dst port":      KeyOf(6, a, netip.AddrPortFrom(b.Addr(), 444)),
		"src addr":      KeyOf(6, netip.MustParseAddrPort("192.0.2.2:5000"), b),
		"zero":          KeyOf(0, netip.AddrPort{}, netip.AddrPort{}),
		"ipv6":          KeyOf(6, netip.MustParseAddrPort("[2001:db8::1]:5000"), b),
		"ports swapped": KeyOf(6, netip.AddrPortFrom(a.Addr(), 443), netip.AddrPortFrom(b.Addr(), 5000)),
	} {
		if other, dup := distinct[k]; dup {
			t.Errorf("%s and %s gave the same key %x", name, other, k)
		}
		distinct[k] = name
	}
}

func TestLookupAllocatesNothing(t *testing.T) {
	tb := mustNew(t, randomMembers(rand.New(rand.NewPCG(1, 3)), 16), Options{})
	down := tb.WithDown(map[string]bool{tb.members[0]: true})
	src := netip.MustParseAddrPort("192.0.2.1:5000")
	dst := netip.MustParseAddrPort("198.51.100.2:443")
	k := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		k++
		tb.Lookup(k)
		down.Lookup(KeyOf(6, src, dst))
		down.LookupIndex(k)
	})
	if allocs != 0 {
		t.Errorf("Lookup, LookupIndex and KeyOf allocate %.1f times per call", allocs)
	}
}

// TestConcurrentLookups is for the race detector: lookups on a shared table
// while health changes swap in new views.
func TestConcurrentLookups(t *testing.T) {
	base := mustNew(t, []string{"a", "b", "c", "d"}, Options{Size: 1009})
	var cur atomic.Pointer[Table]
	cur.Store(base)
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for k := range uint64(20_000) {
				if _, ok := cur.Load().Lookup(k*2 + uint64(g)); !ok {
					t.Error("lookup found no member while at most one is down")
					return
				}
			}
		})
	}
	for i := range 200 {
		cur.Store(cur.Load().WithDown(map[string]bool{base.members[i%4]: i%2 == 0}))
	}
	wg.Wait()
}

// TestOwners: the exposed bucket table and seed reproduce LookupIndex,
// for a configured table and for a view with a member down (whose buckets
// then hold no NoMember while others live).
func TestOwners(t *testing.T) {
	base, err := New([]string{"a", "b", "c"}, Options{Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range []*Table{base, base.WithDown(map[string]bool{"b": true})} {
		seed, owners := tb.Owners()
		if len(owners) != tb.Size() {
			t.Fatalf("%d owners for %d buckets", len(owners), tb.Size())
		}
		for key := uint64(0); key < 100_000; key++ {
			hi, _ := bits.Mul64(mix64(key^seed), uint64(len(owners)))
			want := tb.LookupIndex(key)
			if got := int(owners[hi]); owners[hi] == NoMember || got != want {
				t.Fatalf("key %d: owners say %d, LookupIndex %d", key, owners[hi], want)
			}
		}
	}
}

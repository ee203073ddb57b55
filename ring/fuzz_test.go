package ring

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// FuzzNew builds tables from arbitrary member names (one per line) and
// checks what must hold for any input: New refuses exactly the empty and
// duplicate names and tables too small for the weights; otherwise every
// bucket has an owner, shares follow the weights to within one round, the
// table does not depend on input order, and a dead member's buckets, and
// only those, move and come back.
func FuzzNew(f *testing.F) {
	f.Add("gw-a\ngw-b\ngw-c", uint64(0), uint8(0), uint8(1))
	f.Add("a", uint64(1), uint8(1), uint8(0))
	f.Add("", uint64(2), uint8(2), uint8(3))
	f.Add("x\nx", uint64(3), uint8(3), uint8(0))
	f.Add("a\n\nb", uint64(4), uint8(4), uint8(0))
	f.Add("\xff\xfe\n日本\n10.0.0.1:443\n", uint64(5), uint8(5), uint8(4))
	// Small sizes keep an execution fast; the default size has its own tests.
	sizes := []int{2, 3, 7, 13, 101, 1009, 4099, 10007}
	f.Fuzz(func(t *testing.T, list string, seed uint64, sizeIdx, weight uint8) {
		var members []string
		if list != "" {
			members = strings.Split(list, "\n")
		}
		opts := Options{Size: sizes[int(sizeIdx)%len(sizes)], Seed: seed}
		total := len(members)
		if len(members) > 0 && weight%5 > 0 {
			opts.Weights = map[string]int{members[0]: 1 + int(weight%5)}
			total += int(weight % 5)
		}
		sorted := slices.Clone(members)
		slices.Sort(sorted)
		valid := !slices.Contains(members, "") && len(slices.Compact(sorted)) == len(members) &&
			opts.Size >= total

		tb, err := New(members, opts)
		if (err == nil) != valid {
			t.Fatalf("New(%q, %+v): error %v, valid input: %v", members, opts, err, valid)
		}
		if err != nil {
			return
		}
		n := len(members)
		sum := 0
		lo, hi := math.Inf(1), 0.0
		for i, m := range tb.members {
			c := tb.Buckets(m)
			sum += c
			w := 1
			if tb.weights != nil {
				w = tb.weights[i]
			}
			r := float64(c) / float64(w)
			lo, hi = min(lo, r), max(hi, r)
		}
		if n > 0 && (sum != tb.Size() || hi-lo > 1) {
			t.Fatalf("%d members: %d of %d buckets owned, buckets per weight %.2f..%.2f", n, sum, tb.Size(), lo, hi)
		}
		if n == 0 {
			return
		}

		shuffled := slices.Clone(members)
		rand.New(rand.NewPCG(seed, 0)).Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if again, err := New(shuffled, opts); err != nil || !slices.Equal(again.entry, tb.entry) {
			t.Fatalf("shuffled input: error %v or another table", err)
		}

		dead := members[seed%uint64(n)]
		v := tb.WithDown(map[string]bool{dead: true})
		for b := range tb.entry {
			wasDead := owner(tb, b) == dead
			if wasDead == (owner(v, b) == owner(tb, b)) {
				t.Fatalf("bucket %d: %q → %q with %q down", b, owner(tb, b), owner(v, b), dead)
			}
			if n == 1 && v.LookupIndex(uint64(b)) != -1 {
				t.Fatal("the only member is down but a lookup found one")
			}
		}
		if !slices.Equal(v.WithDown(nil).entry, tb.entry) {
			t.Fatal("restoring the dead member did not restore the table")
		}
	})
}

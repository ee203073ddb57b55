// Package ring picks the remote gateway for a flow with a Maglev lookup table
// (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
// Balancer", NSDI 2016), which seed 003 calls bucket-based consistent ECMP.
//
// A Table has a fixed number of buckets, a prime M (65537 by default), and
// every bucket belongs to one member (a remote gateway). Lookup mixes the flow
// key, maps it to a bucket with one multiplication and reads the owner: no
// division, no search, no allocation, and a flow always lands on the same
// gateway. BenchmarkLookup measures the cost.
//
// Two kinds of change follow two rules:
//
//   - Membership (a gateway added to or removed from the configuration): New
//     builds a fresh Maglev table. Buckets are shared exactly evenly (counts
//     differ by at most one, or follow the weights), and Maglev's per-member
//     permutations keep most buckets in place: adding a gateway to N moves
//     about 1/(N+1) of the flows, removing one moves about 1/N, plus a small
//     excess that the tests bound.
//   - Health (a configured gateway is dead): WithDown keeps the table built for
//     the configuration and gives only the dead gateways' buckets to live
//     ones. A bucket whose configured owner is alive never moves — a Maglev
//     rebuild cannot promise that — and when a gateway recovers, exactly its
//     buckets come back to it.
//
// Dead buckets are handed out by rendezvous hashing, bucket by bucket: each
// goes to the live member with the highest score for that bucket. That keeps
// the heirs' extra load even, and it makes failures compose: whenever one
// gateway dies or recovers, the buckets that move are exactly those it serves
// while alive — its own, plus its share of the buckets of gateways that are
// still dead. WithDown depends only on the configured table and the set of
// dead members, never on earlier calls, so every sending gateway that sees the
// same health agrees on placement whatever order the events arrived in, and a
// flapping gateway leaves the table exactly as it found it.
//
// A Table is immutable: share it between goroutines and replace it (for
// example through an atomic.Pointer) when health or configuration changes.
// Lookups allocate nothing. Processes that build a table from the same
// members, weights, size and seed get the same table, whatever the order of
// the members; the golden test pins the algorithm so that gateways running
// different versions still agree.
package ring

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

const (
	// DefaultSize is the table size when Options.Size is zero and the total
	// weight is at most 655: the prime the Maglev paper uses for small
	// tables. With it, a rebuild for N ≤ 16 members moved less than 1 % of
	// the flows beyond the minimum in TestPropertyMembership.
	DefaultSize = 65537
	// MaxSize bounds Options.Size (and the default for very large weights)
	// so that a bad configuration cannot ask for gigabytes.
	MaxSize = 1 << 24
	// MaxMembers is the most members a table can hold; entries are 16 bits
	// so that the default table is 128 KiB and stays in cache.
	MaxMembers = math.MaxUint16
	// MaxWeight bounds a member's weight.
	MaxWeight = 1000

	// none marks a bucket with no live member; it is never a member index
	// because MaxMembers indices are 0..MaxMembers-1.
	none = math.MaxUint16
)

// Options tunes New. The zero value is ready to use.
type Options struct {
	// Size is the number of buckets and must be a prime (Maglev's
	// permutations need it) of at least the total weight. Zero picks
	// DefaultSize, or the smallest prime ≥ 100 × total weight when that is
	// larger, which keeps every member within 1 % of its share.
	Size int
	// Seed varies the permutations, the rendezvous scores and the key
	// mixing. Every process that must agree on placement (all gateways of a
	// cluster) uses the same seed.
	Seed uint64
	// Weights gives a member a share of buckets proportional to its weight,
	// an integer 1..MaxWeight. Members missing here have weight 1; names
	// that are not members are an error, so a typo does not go unnoticed.
	Weights map[string]int
}

// Table maps flow keys to members. Build one with New; derive health views
// with WithDown.
type Table struct {
	members []string // sorted, so that input order does not matter
	weights []int    // parallel to members; nil when every weight is 1
	hashes  []uint64 // per member: seeds its permutation and rendezvous score
	entry   []uint16 // bucket → member index, or none
	counts  []int    // buckets per member in entry
	seed    uint64   // mixed into every key
	base    *Table   // the table for the configuration; itself there
	down    []bool   // per member, nil when no member is down
}

// New builds the Maglev table for members. Members are names (for example
// gateway IDs); they must be non-empty and distinct, and their order does
// not matter. An empty list gives a table in which every lookup reports no
// member, so callers need no special case for a peer with no gateways yet.
func New(members []string, opts Options) (*Table, error) {
	if len(members) > MaxMembers {
		return nil, fmt.Errorf("ring: %d members, at most %d allowed", len(members), MaxMembers)
	}
	names := slices.Clone(members)
	slices.Sort(names)
	for i, name := range names {
		if name == "" {
			return nil, errors.New("ring: empty member name")
		}
		if i > 0 && names[i-1] == name {
			return nil, fmt.Errorf("ring: duplicate member %q", name)
		}
	}

	total := len(names)
	var weights []int
	for name, w := range opts.Weights {
		i, ok := slices.BinarySearch(names, name)
		if !ok {
			return nil, fmt.Errorf("ring: weights: %q is not a member", name)
		}
		if w < 1 || w > MaxWeight {
			return nil, fmt.Errorf("ring: weights: %q has weight %d, allowed 1..%d", name, w, MaxWeight)
		}
		if w == 1 {
			continue
		}
		if weights == nil {
			weights = make([]int, len(names))
			for j := range weights {
				weights[j] = 1
			}
		}
		weights[i] = w
		total += w - 1
	}

	size := opts.Size
	switch {
	case size == 0:
		size = DefaultSize
		if 100*total > MaxSize {
			return nil, fmt.Errorf("ring: total weight %d needs more than %d buckets; set Size", total, MaxSize)
		}
		if 100*total > size {
			size = nextPrime(100 * total)
		}
	case size < 2 || size > MaxSize || !isPrime(size):
		return nil, fmt.Errorf("ring: size %d must be a prime in 2..%d (or 0 for the default)", size, MaxSize)
	case size < total:
		// Fewer buckets than turns in one round would leave members with
		// no bucket at all, silently.
		return nil, fmt.Errorf("ring: size %d is smaller than the total weight %d of the members", size, total)
	}

	t := &Table{
		members: names,
		weights: weights,
		hashes:  make([]uint64, len(names)),
		entry:   make([]uint16, size),
		seed:    mix64(opts.Seed ^ seedKey),
	}
	t.base = t
	for i, name := range names {
		t.hashes[i] = hashString(name, opts.Seed)
	}
	t.populate()
	t.counts = countBuckets(t.entry, len(names))
	return t, nil
}

// populate fills the table as in the Maglev paper (Pseudocode 1): every
// member walks its own permutation of the buckets, (offset + j·skip) mod M,
// and the members take turns claiming their next free bucket; a member with
// weight w takes w turns per round. Because a member's permutation depends
// only on its name, most members claim the same buckets after a membership
// change, which is where the consistency comes from.
func (t *Table) populate() {
	m := uint64(len(t.entry))
	for i := range t.entry {
		t.entry[i] = none
	}
	n := len(t.members)
	if n == 0 {
		return
	}
	pos := make([]uint64, n)
	skip := make([]uint64, n)
	for i, h := range t.hashes {
		pos[i] = mix64(h^offsetKey) % m
		skip[i] = mix64(h^skipKey)%(m-1) + 1
	}
	filled := uint64(0)
	for {
		for i := range n {
			turns := 1
			if t.weights != nil {
				turns = t.weights[i]
			}
			for ; turns > 0; turns-- {
				c := pos[i]
				for t.entry[c] != none {
					c += skip[i]
					if c >= m {
						c -= m
					}
				}
				t.entry[c] = uint16(i)
				c += skip[i]
				if c >= m {
					c -= m
				}
				pos[i] = c
				if filled++; filled == m {
					return
				}
			}
		}
	}
}

// WithDown returns the view of t's configured table in which the members in
// down (those mapped to true) are dead: their buckets go to live members, and
// no other bucket changes. down is the complete set of dead members; the
// dead set of t itself, if t is already a view, is ignored, so the result
// depends only on the configuration and down. Names that are not members are
// ignored, since a health map may still hold a gateway the configuration has
// dropped. When every member is down, Lookup reports no member.
//
// The cost is a copy of the table plus one score per dead bucket and live
// member, about M·d·(N−d)/N hashes for d of N members dead; it is paid once
// per health change, never per lookup (BenchmarkWithDown).
func (t *Table) WithDown(down map[string]bool) *Table {
	b := t.base
	var dead []bool
	for name, isDown := range down {
		if !isDown {
			continue
		}
		i, ok := slices.BinarySearch(b.members, name)
		if !ok {
			continue
		}
		if dead == nil {
			dead = make([]bool, len(b.members))
		}
		dead[i] = true
	}
	if dead == nil {
		return b
	}
	live := make([]int, 0, len(b.members))
	for i, d := range dead {
		if !d {
			live = append(live, i)
		}
	}

	v := &Table{
		members: b.members,
		weights: b.weights,
		hashes:  b.hashes,
		entry:   make([]uint16, len(b.entry)),
		seed:    b.seed,
		base:    b,
		down:    dead,
	}
	for bucket, owner := range b.entry {
		if dead[owner] { // owner is never none: b has members, since dead != nil
			owner = b.heir(bucket, live)
		}
		v.entry[bucket] = owner
	}
	v.counts = countBuckets(v.entry, len(b.members))
	return v
}

// heir picks the live member that takes over a dead bucket: the highest
// rendezvous score for the bucket, weighted by the logarithmic method
// (score w / −ln u for a uniform u), so heirs gain load in proportion to
// their weights. Unweighted tables compare the raw
// scores, which orders members the same way without the logarithm.
func (t *Table) heir(bucket int, live []int) uint16 {
	if len(live) == 0 {
		return none
	}
	key := uint64(bucket) * golden
	best := live[0]
	if t.weights == nil {
		bestScore := mix64(t.hashes[best] ^ key)
		for _, i := range live[1:] {
			if s := mix64(t.hashes[i] ^ key); s > bestScore {
				best, bestScore = i, s
			}
		}
		return uint16(best)
	}
	bestScore := weightedScore(mix64(t.hashes[best]^key), t.weights[best])
	for _, i := range live[1:] {
		if s := weightedScore(mix64(t.hashes[i]^key), t.weights[i]); s > bestScore {
			best, bestScore = i, s
		}
	}
	return uint16(best)
}

func weightedScore(h uint64, w int) float64 {
	u := (float64(h>>11) + 0.5) / (1 << 53) // in (0, 1), never 0 or 1
	return float64(w) / -math.Log(u)
}

// Lookup returns the member that serves key, or false when the table has no
// live member. Any key works: Lookup mixes it first, so counters, ports and
// KeyOf results all spread evenly.
func (t *Table) Lookup(key uint64) (string, bool) {
	i := t.LookupIndex(key)
	if i < 0 {
		return "", false
	}
	return t.members[i], true
}

// LookupIndex is Lookup returning the member's index in Members (the same in
// every view of one configuration), or -1 when no member is live; callers
// that keep per-member state in a slice avoid a map lookup with it.
func (t *Table) LookupIndex(key uint64) int {
	// Lemire's multiply-shift maps the mixed key onto [0, M) without a
	// division; mixing first makes the high bits uniform, which it needs.
	hi, _ := bits.Mul64(mix64(key^t.seed), uint64(len(t.entry)))
	e := t.entry[hi]
	if e == none {
		return -1
	}
	return int(e)
}

// Members returns the configured members, sorted, dead ones included; index
// i of the result is what LookupIndex returns for member i.
func (t *Table) Members() []string { return slices.Clone(t.members) }

// Buckets returns how many buckets member serves in this view: 0 for a dead
// member or a name that is not a member. Buckets/Size is its share of flows.
func (t *Table) Buckets(member string) int {
	i, ok := slices.BinarySearch(t.members, member)
	if !ok {
		return 0
	}
	return t.counts[i]
}

// Down reports whether member is dead in this view.
func (t *Table) Down(member string) bool {
	i, ok := slices.BinarySearch(t.members, member)
	return ok && t.down != nil && t.down[i]
}

// NoMember is the owner Owners reports for a bucket with no live member.
const NoMember = none

// Owners exposes the lookup for data planes that do it themselves (package
// packet's BPF programs): LookupIndex(key) is owners[hi], where hi is the
// high word of the 128-bit product mix64(key ^ seed) · len(owners), and a
// bucket holding NoMember means no live member. owners is a copy.
func (t *Table) Owners() (seed uint64, owners []uint16) {
	return t.seed, slices.Clone(t.entry)
}

// Size returns the number of buckets, M.
func (t *Table) Size() int { return len(t.entry) }

func countBuckets(entry []uint16, n int) []int {
	counts := make([]int, n)
	for _, e := range entry {
		if e != none {
			counts[e]++
		}
	}
	return counts
}

func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

func nextPrime(n int) int {
	for !isPrime(n) {
		n++
	}
	return n
}

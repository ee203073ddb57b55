package placement

import "sort"

// state is an assignment under construction with the counters that make
// tenant-constraint checks O(tenants of the cluster).
type state struct {
	in      *instance
	broker  []int     // cluster -> broker, -1 if unassigned
	load    []float64 // absolute demand per broker
	cnt     [][]int32 // tenant -> broker -> number of its clusters there
	nUsed   []int     // tenant -> number of brokers with cnt > 0
	compOf  []int     // cluster -> component (clusters linked by tenants)
	members [][]int   // component -> clusters
}

func newState(in *instance) *state {
	s := &state{
		in:     in,
		broker: make([]int, in.nC),
		load:   make([]float64, in.nB),
		cnt:    make([][]int32, len(in.clustersOf)),
		nUsed:  make([]int, len(in.clustersOf)),
	}
	for c := range s.broker {
		s.broker[c] = -1
	}
	for t := range s.cnt {
		s.cnt[t] = make([]int32, in.nB)
	}
	return s
}

func (s *state) place(c, b int) {
	if old := s.broker[c]; old >= 0 {
		s.load[old] -= s.in.demand[c]
		for _, t := range s.in.tenantsOf[c] {
			s.cnt[t][old]--
			if s.cnt[t][old] == 0 {
				s.nUsed[t]--
			}
		}
	}
	s.broker[c] = b
	if b >= 0 {
		s.load[b] += s.in.demand[c]
		for _, t := range s.in.tenantsOf[c] {
			if s.cnt[t][b] == 0 {
				s.nUsed[t]++
			}
			s.cnt[t][b]++
		}
	}
}

// allowed reports whether putting cluster c on b keeps all its tenants within
// K (counting c as removed from its current broker).
func (s *state) allowed(c, b int) bool {
	old := s.broker[c]
	if b == old {
		return true
	}
	for _, t := range s.in.tenantsOf[c] {
		if s.cnt[t][b] > 0 {
			continue
		}
		used := s.nUsed[t]
		if old >= 0 && s.cnt[t][old] == 1 {
			used--
		}
		if used+1 > s.in.k {
			return false
		}
	}
	return true
}

func (s *state) ratio(b int) float64 { return s.load[b] / s.in.capacity[b] }

func (s *state) maxLoad() (float64, int) {
	m, arg := -1.0, 0
	for b := range s.load {
		if r := s.ratio(b); r > m {
			m, arg = r, b
		}
	}
	return m, arg
}

func (s *state) violated() []int {
	var v []int
	for t, n := range s.nUsed {
		if n > s.in.k {
			v = append(v, t)
		}
	}
	return v
}

// components links clusters that share a tenant; the tenant constraint only
// couples clusters within a component, and a whole component on one broker
// satisfies it for every tenant in it.
func (s *state) components() {
	if s.compOf != nil {
		return
	}
	in := s.in
	parent := make([]int, in.nC)
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(x int) int {
		for parent[x] != x {
			parent[x] = parent[parent[x]]
			x = parent[x]
		}
		return x
	}
	for _, cs := range in.clustersOf {
		for _, c := range cs[min(1, len(cs)):] {
			if a, b := find(cs[0]), find(c); a != b {
				parent[a] = b
			}
		}
	}
	s.compOf = make([]int, in.nC)
	idx := map[int]int{}
	for c := range parent {
		r := find(c)
		i, ok := idx[r]
		if !ok {
			i = len(s.members)
			idx[r] = i
			s.members = append(s.members, nil)
		}
		s.compOf[c] = i
		s.members[i] = append(s.members[i], c)
	}
}

// repair makes the state feasible, deterministically: unassigned clusters go
// to the least loaded allowed broker; then each violating tenant keeps the K
// brokers carrying most of its demand and its other clusters move there,
// preferring brokers that do not push a co-tenant over K; then a
// min-conflicts search moves groups of clusters between brokers to remove the
// remaining violations; if some survive, each component that still has one
// moves whole to one broker, which is always feasible.
func (s *state) repair() {
	in := s.in
	var unassigned []int
	for c, b := range s.broker {
		if b < 0 {
			unassigned = append(unassigned, c)
		}
	}
	sortByDemand(in, unassigned)
	for _, c := range unassigned {
		s.place(c, s.leastLoaded(c, nil))
	}
	for pass := 0; pass < repairPasses; pass++ {
		bad := s.violated()
		if len(bad) == 0 {
			return
		}
		for _, t := range bad {
			if s.nUsed[t] <= in.k {
				continue
			}
			keep := s.topBrokers(t)
			for _, c := range in.clustersOf[t] {
				if keep[s.broker[c]] {
					continue
				}
				s.place(c, s.leastLoaded(c, keep))
			}
		}
	}
	if s.minConflicts(20*in.nC + 100) {
		return
	}
	bad := s.violated()
	s.components()
	done := map[int]bool{}
	for _, t := range bad {
		comp := s.compOf[in.clustersOf[t][0]]
		if done[comp] {
			continue
		}
		done[comp] = true
		cs := s.members[comp]
		for _, c := range cs {
			s.place(c, -1)
		}
		var d float64
		for _, c := range cs {
			d += in.demand[c]
		}
		best, bestR := 0, 0.0
		for b := range in.capacity {
			if r := (s.load[b] + d) / in.capacity[b]; b == 0 || r < bestR {
				best, bestR = b, r
			}
		}
		for _, c := range cs {
			s.place(c, best)
		}
	}
}

// topBrokers is the set of the K brokers carrying most of tenant t's demand.
func (s *state) topBrokers(t int) []bool {
	in := s.in
	dem := make([]float64, in.nB)
	for _, c := range in.clustersOf[t] {
		dem[s.broker[c]] += in.demand[c] + 1e-12 // ties: count of clusters
	}
	order := make([]int, in.nB)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return dem[order[i]] > dem[order[j]] })
	keep := make([]bool, in.nB)
	for _, b := range order[:min(in.k, in.nB)] {
		keep[b] = true
	}
	return keep
}

// leastLoaded picks the broker (within restrict, if not nil) minimizing the
// load ratio after adding c, preferring brokers allowed by the tenant
// constraint. Deterministic: ties go to the lower index.
func (s *state) leastLoaded(c int, restrict []bool) int {
	in := s.in
	best, bestR, bestOK := -1, 0.0, false
	for b := range in.capacity {
		if restrict != nil && !restrict[b] {
			continue
		}
		ok := s.allowed(c, b)
		add := in.demand[c]
		if s.broker[c] == b {
			add = 0
		}
		r := (s.load[b] + add) / in.capacity[b]
		if best < 0 || (ok && !bestOK) || (ok == bestOK && r < bestR) {
			best, bestR, bestOK = b, r, ok
		}
	}
	return best
}

// polish is a deterministic local search that keeps feasibility: move a
// cluster off the most loaded broker, or swap it with a smaller cluster of
// another broker, whenever that lowers the pair's maximum below the current
// maximum. It stops when the most loaded broker cannot be relieved, or when
// the maximum is at most target.
func (s *state) polish(target float64, maxIter int) {
	in := s.in
	for iter := 0; iter < maxIter; iter++ {
		cur, bmax := s.maxLoad()
		if cur <= target {
			return
		}
		var on []int
		for c, b := range s.broker {
			if b == bmax && in.demand[c] > 0 {
				on = append(on, c)
			}
		}
		bestVal, bc, bb, bswap := cur, -1, -1, -1
		for _, c := range on {
			d := in.demand[c]
			for b := range in.capacity {
				if b == bmax {
					continue
				}
				// move
				v := max((s.load[bmax]-d)/in.capacity[bmax], (s.load[b]+d)/in.capacity[b])
				if v < bestVal-1e-12 && s.allowed(c, b) {
					bestVal, bc, bb, bswap = v, c, b, -1
				}
			}
		}
		if bc < 0 {
			// swaps: c on bmax with a smaller c2 elsewhere
			for _, c := range on {
				d := in.demand[c]
				for c2, b := range s.broker {
					d2 := in.demand[c2]
					if b == bmax || d2 >= d {
						continue
					}
					v := max((s.load[bmax]-d+d2)/in.capacity[bmax], (s.load[b]+d-d2)/in.capacity[b])
					if v >= bestVal-1e-12 {
						continue
					}
					if s.swapAllowed(c, c2) {
						bestVal, bc, bb, bswap = v, c, b, c2
					}
				}
			}
		}
		if bc < 0 {
			return
		}
		if bswap >= 0 {
			s.place(bc, bb)
			s.place(bswap, bmax)
		} else {
			s.place(bc, bb)
		}
	}
}

func (s *state) swapAllowed(c, c2 int) bool {
	b, b2 := s.broker[c], s.broker[c2]
	s.place(c, b2)
	s.place(c2, b)
	ok := true
	for _, t := range s.in.tenantsOf[c] {
		ok = ok && s.nUsed[t] <= s.in.k
	}
	for _, t := range s.in.tenantsOf[c2] {
		ok = ok && s.nUsed[t] <= s.in.k
	}
	s.place(c2, b2)
	s.place(c, b)
	return ok
}

func sortByDemand(in *instance, cs []int) {
	sort.SliceStable(cs, func(i, j int) bool { return in.demand[cs[i]] > in.demand[cs[j]] })
}

var repairPasses = 4

// minConflicts removes tenant-constraint violations by group moves: for a
// violating tenant t (taken in rotation), move all of t's clusters on one of
// its brokers a to another of its brokers b, choosing the move that lowers
// the total excess Σ_t max(0, brokers(t) − K) most, then the load of b. Moves
// that do not raise the excess are allowed so the search can walk plateaus;
// the iteration cap bounds it. Reports whether all violations are gone.
func (s *state) minConflicts(maxIter int) bool {
	in := s.in
	excess := func(ts []int) int {
		e := 0
		for _, t := range ts {
			e += max(0, s.nUsed[t]-in.k)
		}
		return e
	}
	var group, affected, from []int
	seen := make([]int, len(in.clustersOf))
	stamp := 0
	for iter := 0; iter < maxIter; iter++ {
		bad := s.violated()
		if len(bad) == 0 {
			return true
		}
		t := bad[iter%len(bad)]
		var brokers []int
		for b, n := range s.cnt[t] {
			if n > 0 {
				brokers = append(brokers, b)
			}
		}
		bestDV, bestR, bestA, bestB := 0, 0.0, -1, -1
		for _, a := range brokers {
			group = group[:0]
			for _, c := range in.clustersOf[t] {
				if s.broker[c] == a {
					group = append(group, c)
				}
			}
			stamp++
			affected = affected[:0]
			for _, c := range group {
				for _, u := range in.tenantsOf[c] {
					if seen[u] != stamp {
						seen[u] = stamp
						affected = append(affected, u)
					}
				}
			}
			before := excess(affected)
			var d float64
			for _, c := range group {
				d += in.demand[c]
			}
			for _, b := range brokers {
				if b == a {
					continue
				}
				from = from[:0]
				for _, c := range group {
					from = append(from, s.broker[c])
					s.place(c, b)
				}
				dv := excess(affected) - before
				for i, c := range group {
					s.place(c, from[i])
				}
				r := (s.load[b] + d) / in.capacity[b]
				if bestA < 0 || dv < bestDV || (dv == bestDV && r < bestR) {
					bestDV, bestR, bestA, bestB = dv, r, a, b
				}
			}
		}
		if bestA < 0 || bestDV > 0 {
			return false
		}
		for _, c := range in.clustersOf[t] {
			if s.broker[c] == bestA {
				s.place(c, bestB)
			}
		}
	}
	return len(s.violated()) == 0
}

package placement

import (
	"math"
)

// Why no general LP solver on the full problem. gonum v0.16.0
// optimize/convex/lp.Simplex is a dense-tableau simplex (general form goes
// through lp.Convert, which splits every variable and adds slacks). Measured
// on this machine (2 shared cores) on the literal LP relaxation of Eq. (1):
// 3 brokers × 6 clusters × 4 tenants (31 variables) 36 ms; 5 × 20 × 10 (151
// variables) 3.8 s; 10 × 30 × 20 (501 variables, 1071 rows) ran 8 min and
// then failed ("error finding feasible basis: matrix singular"). At 100
// brokers × 1000 clusters × 10 000 VPCs the LP has ~2·10^5 variables and
// ~10^6 rows: out of reach for a dense simplex. gonum is the LP solver the module
// already depends on (through gonum/plot); a sparse solver would be a new
// dependency and, as shown next, is not needed. TestRelaxationMatchesSimplex still
// solves the literal LP with Simplex on small instances, and it always lands
// on RelaxationBound, which is the key observation:
//
// The LP relaxation of Eq. (1) is trivial. Summing the load rows gives
// λ·ΣA(b) ≥ ΣD(c), so λ ≥ ΣD/ΣA; and z_c^b = y_t^b = A(b)/ΣA is feasible
// (Σ_b y_t^b = 1 ≤ k) with exactly that λ. The tenant rows never bind because
// a fractional tenant may spread thinly over all brokers. So the paper's LP
// bound is ΣD/ΣA and its solution carries no information for rounding.
//
// We therefore use the standard strengthening for min-max assignment LPs
// (Lenstra–Shmoys–Tardos): for a guess λ, forbid z_c^b where D(c) > λ·A(b)
// (no integral solution of value λ can use that pair), drop the tenant rows,
// and ask whether the remaining assignment LP is feasible. That LP is a
// transportation problem, so feasibility is one max-flow (source→cluster
// D(c), cluster→allowed broker, broker→sink λ·A(b)); bisection on λ finds the
// smallest feasible λ. It is a relaxation of the integral BCM problem, hence a
// lower bound on any feasible assignment, and ≥ ΣD/ΣA. TestFlowMatchesSimplex
// checks the flow feasibility against Simplex on small instances. At 100 ×
// 1000 × 10 000 the whole bisection (Dinic max-flow, 20–30 flows) takes
// 5–50 ms (see BenchmarkLowerBound and the compare table). The
// flow's cluster→broker split is the fractional z̃ that RBCM rounds.

// RelaxationBound is the optimal value of the LP relaxation of Eq. (1):
// ΣD / ΣA (see the comment above for the proof). m must be valid.
func RelaxationBound(m *Model) float64 {
	return relaxationBound(compile(m))
}

func relaxationBound(in *instance) float64 {
	var d, a float64
	for _, x := range in.demand {
		d += x
	}
	for _, x := range in.capacity {
		a += x
	}
	return d / a
}

// LowerBound is the strengthened LP bound λ_LP: the largest λ (to relative
// tolerance tol; 0 means 1e-6) for which the pruned assignment LP is shown
// infeasible. With K = 1 it is computed on the instance contracted to
// components (contract.go). Every feasible assignment has MaxLoad ≥ LowerBound. m must be
// valid.
func LowerBound(m *Model, tol float64) float64 {
	in, _ := contract(compile(m))
	lb, _ := lowerBound(in, tol)
	return lb
}

// fractional is the LP solution RBCM rounds: z[c] lists the brokers with
// z̃_c^b > 0 and their fractions (summing to 1).
type fractional struct {
	lambda float64
	z      [][]share
}

type share struct {
	b int
	x float64
}

// lowerBound returns λ_LP and the fractional solution of the feasible end of
// the bisection.
func lowerBound(in *instance, tol float64) (float64, fractional) {
	if tol <= 0 {
		tol = 1e-6
	}
	var total, maxD, maxA float64
	for _, d := range in.demand {
		total += d
		maxD = max(maxD, d)
	}
	for _, a := range in.capacity {
		maxA = max(maxA, a)
	}
	lo := max(relaxationBound(in), maxD/maxA)
	hi := total / maxA // everything on the biggest broker is always feasible
	if total == 0 {
		return 0, in.proportional(0)
	}
	g := newFlowGraph(in)
	var best fractional
	if z, ok := g.feasible(lo); ok {
		return lo, fractional{lambda: lo, z: z}
	}
	z, ok := g.feasible(hi)
	for i := 0; !ok && i < 64; i++ {
		// Cannot happen in exact arithmetic; guard against rounding.
		hi *= 1 + math.Pow(2, float64(i-30))
		z, ok = g.feasible(hi)
	}
	if !ok {
		return lo, in.proportional(hi)
	}
	best = fractional{lambda: hi, z: z}
	for hi-lo > tol*lo {
		mid := (lo + hi) / 2
		if mid <= lo || mid >= hi {
			// No float between them: with subnormal bounds tol*lo
			// underflows to 0 and the loop would never end.
			break
		}
		if z, ok := g.feasible(mid); ok {
			hi = mid
			best = fractional{lambda: mid, z: z}
		} else {
			lo = mid
		}
	}
	// lo is infeasible (or the trivial bound), hi is feasible: report hi so
	// that the bound's fractional solution exists, but as a bound use lo,
	// which every integral solution is at least.
	best.lambda = hi
	return lo, best
}

// proportional is the trivial LP solution z_c^b = A(b)/ΣA.
func (in *instance) proportional(lambda float64) fractional {
	var a float64
	for _, x := range in.capacity {
		a += x
	}
	row := make([]share, in.nB)
	for b, x := range in.capacity {
		row[b] = share{b, x / a}
	}
	f := fractional{lambda: lambda, z: make([][]share, in.nC)}
	for c := range f.z {
		f.z[c] = row
	}
	return f
}

// flowGraph is a Dinic max-flow network for the feasibility check, rebuilt
// in place for every λ (only capacities and allowed arcs change).
type flowGraph struct {
	in    *instance
	total float64
	order []int // brokers by decreasing capacity

	// adjacency in CSR-free form: edges stored in slices
	head           []int
	to, next       []int
	capa           []float64
	level, it, que []int
}

func newFlowGraph(in *instance) *flowGraph {
	g := &flowGraph{in: in}
	for _, d := range in.demand {
		g.total += d
	}
	return g
}

func (g *flowGraph) addEdge(u, v int, c float64) int {
	g.to = append(g.to, v)
	g.capa = append(g.capa, c)
	g.next = append(g.next, g.head[u])
	g.head[u] = len(g.to) - 1
	g.to = append(g.to, u)
	g.capa = append(g.capa, 0)
	g.next = append(g.next, g.head[v])
	g.head[v] = len(g.to) - 1
	return len(g.to) - 2
}

// feasible reports whether the pruned assignment LP at λ is feasible and, if
// so, returns its z̃. Nodes: 0 source, 1..nC clusters, then brokers, then sink.
func (g *flowGraph) feasible(lambda float64) ([][]share, bool) {
	in := g.in
	n := in.nC + in.nB + 2
	s, t := 0, n-1
	if cap(g.head) < n {
		g.head = make([]int, n)
		g.level = make([]int, n)
		g.it = make([]int, n)
		g.que = make([]int, n)
	}
	g.head = g.head[:n]
	for i := range g.head {
		g.head[i] = -1
	}
	g.to, g.capa, g.next = g.to[:0], g.capa[:0], g.next[:0]
	inf := g.total * 2
	arcs := make([][]int, in.nC) // arc ids cluster -> broker, for reading z̃
	for c, d := range in.demand {
		if d == 0 {
			continue
		}
		g.addEdge(s, 1+c, d)
		for b, a := range in.capacity {
			if d <= lambda*a*(1+1e-12) {
				arcs[c] = append(arcs[c], g.addEdge(1+c, 1+in.nC+b, inf))
			}
		}
		if len(arcs[c]) == 0 {
			return nil, false
		}
	}
	for b, a := range in.capacity {
		g.addEdge(1+in.nC+b, t, lambda*a)
	}
	flow := g.maxflow(s, t)
	if flow < g.total*(1-1e-9) {
		return nil, false
	}
	z := make([][]share, in.nC)
	prop := in.proportional(0).z
	for c, d := range in.demand {
		if d == 0 {
			z[c] = prop[c]
			continue
		}
		var sum float64
		for _, e := range arcs[c] {
			if f := g.capa[e^1]; f > 0 {
				z[c] = append(z[c], share{g.to[e] - 1 - in.nC, f})
				sum += f
			}
		}
		if sum == 0 {
			// Demand below the flow's tolerance: any allowed broker will do.
			z[c] = []share{{g.to[arcs[c][0]] - 1 - in.nC, 1}}
			continue
		}
		for i := range z[c] {
			z[c][i].x /= sum
		}
	}
	return z, true
}

const flowEps = 1e-12

func (g *flowGraph) bfs(s, t int) bool {
	for i := range g.level {
		g.level[i] = -1
	}
	g.level[s] = 0
	q := g.que[:0]
	q = append(q, s)
	for i := 0; i < len(q); i++ {
		u := q[i]
		for e := g.head[u]; e >= 0; e = g.next[e] {
			if g.capa[e] > flowEps*g.total && g.level[g.to[e]] < 0 {
				g.level[g.to[e]] = g.level[u] + 1
				q = append(q, g.to[e])
			}
		}
	}
	return g.level[t] >= 0
}

func (g *flowGraph) dfs(u, t int, f float64) float64 {
	if u == t {
		return f
	}
	for ; g.it[u] >= 0; g.it[u] = g.next[g.it[u]] {
		e := g.it[u]
		v := g.to[e]
		if g.capa[e] > flowEps*g.total && g.level[v] == g.level[u]+1 {
			if d := g.dfs(v, t, math.Min(f, g.capa[e])); d > 0 {
				g.capa[e] -= d
				g.capa[e^1] += d
				return d
			}
		}
	}
	return 0
}

func (g *flowGraph) maxflow(s, t int) float64 {
	var flow float64
	for g.bfs(s, t) {
		copy(g.it, g.head)
		for {
			f := g.dfs(s, t, math.Inf(1))
			if f <= 0 {
				break
			}
			flow += f
		}
	}
	return flow
}

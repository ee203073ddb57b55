package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Config tunes Solve, Greedy and Remap. The zero value is usable.
type Config struct {
	// Seed drives the randomized rounding; same seed, same assignment.
	Seed uint64
	// Rounds is R in best-of-R roundings (0 means 8).
	Rounds int
	// Tolerance is the relative tolerance of the LP bisection (0 means 1e-6).
	Tolerance float64
	// NoPolish turns off the feasibility-preserving local search after
	// rounding and repair, leaving Algorithm 1 + repair only.
	NoPolish bool
	// Slack is how much above a fresh solution's max load Remap accepts to
	// keep clusters where they are (0 means 0.05, i.e. 5 %).
	Slack float64
}

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.Rounds < 0 || c.Rounds > 10000 {
		return fmt.Errorf("config.Rounds: %d, must be in [0, 10000]", c.Rounds)
	}
	if !(c.Tolerance >= 0 && c.Tolerance < 0.1) {
		return fmt.Errorf("config.Tolerance: %v, must be in [0, 0.1)", c.Tolerance)
	}
	if !(c.Slack >= 0) || math.IsInf(c.Slack, 0) {
		return fmt.Errorf("config.Slack: %v, must be finite and >= 0", c.Slack)
	}
	return nil
}

func (c Config) rounds() int {
	if c.Rounds == 0 {
		return 8
	}
	return c.Rounds
}

func (c Config) slack() float64 {
	if c.Slack == 0 {
		return 0.05
	}
	return c.Slack
}

// Result is a feasible assignment and how it compares with the bounds.
type Result struct {
	Assignment Assignment
	// MaxLoad is λ of Assignment.
	MaxLoad float64
	// RelaxationBound is the LP relaxation of Eq. (1): ΣD/ΣA.
	RelaxationBound float64
	// LowerBound is the strengthened LP bound (see bound.go); ≥ RelaxationBound.
	LowerBound float64
	// RoundedMaxLoad is the best λ after rounding and repair, before polish.
	RoundedMaxLoad float64
	// Repaired counts roundings (of Rounds) that violated a hard constraint
	// and needed the repair step.
	Repaired int
}

// Solve runs RBCM: the LP (bound.go), Rounds independent roundings as in
// Algorithm 1, the repair step on each, optional polish, and keeps the best.
func Solve(m *Model, cfg Config) (Result, error) {
	if err := m.Validate(); err != nil {
		return Result{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	in := compile(m)
	s, res := solve(in, cfg)
	res.Assignment = in.assignment(s.broker)
	return res, nil
}

func solve(orig *instance, cfg Config) (*state, Result) {
	in, comp := contract(orig)
	lb, frac := lowerBound(in, cfg.Tolerance)
	res := Result{RelaxationBound: relaxationBound(orig), LowerBound: lb, RoundedMaxLoad: math.Inf(1), MaxLoad: math.Inf(1)}
	y := tenantFractions(in, frac)
	var best *state
	proto := newState(in)
	proto.components() // shared by the rounds' repair fallback
	for r := 0; r < cfg.rounds(); r++ {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(r)))
		s := newState(in)
		s.compOf, s.members = proto.compOf, proto.members
		round(s, frac, y, rng)
		if len(s.violated()) > 0 {
			res.Repaired++
		}
		s.repair()
		l, _ := s.maxLoad()
		res.RoundedMaxLoad = min(res.RoundedMaxLoad, l)
		if !cfg.NoPolish {
			s.polish(lb, 50*in.nC+100)
			l, _ = s.maxLoad()
		}
		if l < res.MaxLoad {
			best, res.MaxLoad = s, l
		}
	}
	if comp != nil {
		best = expand(orig, comp, best)
	}
	return best, res
}

// tenantFractions is ỹ_t^b = max over the tenant's clusters of z̃_c^b, the
// smallest y satisfying Eq. (1)'s coupling rows for the LP's z̃.
func tenantFractions(in *instance, f fractional) [][]float64 {
	y := make([][]float64, len(in.clustersOf))
	for t, cs := range in.clustersOf {
		y[t] = make([]float64, in.nB)
		for _, c := range cs {
			for _, sh := range f.z[c] {
				y[t][sh.b] = max(y[t][sh.b], sh.x)
			}
		}
	}
	return y
}

// round is Algorithm 1 step 2. Each tenant opens broker b with probability
// ỹ_t^b, repeating until it opens at least one (lines 6–11). Each cluster then
// picks one broker among those open for all its tenants with probability
// proportional to z̃_c^b (lines 12–15); if that set is empty it picks from its
// whole LP support by z̃ and leaves the tenant constraint to repair.
func round(s *state, f fractional, y [][]float64, rng *rand.Rand) {
	in := s.in
	open := make([][]bool, len(y))
	for t := range y {
		open[t] = make([]bool, in.nB)
		var any bool
		for try := 0; !any && try < 64; try++ {
			for b, p := range y[t] {
				if p > 0 && rng.Float64() < p {
					open[t][b], any = true, true
				}
			}
		}
	}
	for c := range in.demand {
		var sum float64
		cand := f.z[c][:0:0]
		for _, sh := range f.z[c] {
			ok := true
			for _, t := range in.tenantsOf[c] {
				ok = ok && open[t][sh.b]
			}
			if ok {
				cand = append(cand, sh)
				sum += sh.x
			}
		}
		if len(cand) == 0 {
			cand = f.z[c]
			sum = 0
			for _, sh := range cand {
				sum += sh.x
			}
		}
		u := rng.Float64() * sum
		pick := cand[len(cand)-1].b
		for _, sh := range cand {
			if u < sh.x {
				pick = sh.b
				break
			}
			u -= sh.x
		}
		s.place(c, pick)
	}
}

// Greedy is the baseline: clusters by decreasing demand, each to the broker
// with the lowest resulting load ratio among those the tenant constraint
// allows, then the same repair as RBCM for the dead ends. No polish. The
// Result's LowerBound is left zero (Greedy solves no LP).
func Greedy(m *Model) (Result, error) {
	if err := m.Validate(); err != nil {
		return Result{}, err
	}
	in := compile(m)
	s := greedy(in)
	l, _ := s.maxLoad()
	return Result{Assignment: in.assignment(s.broker), MaxLoad: l, RoundedMaxLoad: l,
		RelaxationBound: relaxationBound(in)}, nil
}

func greedy(in *instance) *state {
	s := newState(in)
	order := make([]int, in.nC)
	for i := range order {
		order[i] = i
	}
	sortByDemand(in, order)
	for _, c := range order {
		s.place(c, s.leastLoaded(c, nil))
	}
	s.repair()
	return s
}

package placement

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// lpProblem collects a general-form LP min cᵀx, Gx ≤ h, Ax = b, x ≥ 0.
type lpProblem struct {
	n    int
	c    []float64
	g, a [][]float64
	h, b []float64
}

func (p *lpProblem) le(row []float64, rhs float64) { p.g, p.h = append(p.g, row), append(p.h, rhs) }
func (p *lpProblem) eq(row []float64, rhs float64) { p.a, p.b = append(p.a, row), append(p.b, rhs) }

func dense(rows [][]float64, n int) *mat.Dense {
	if len(rows) == 0 {
		return nil
	}
	d := mat.NewDense(len(rows), n, nil)
	for i, r := range rows {
		d.SetRow(i, r)
	}
	return d
}

func (p *lpProblem) solve(t *testing.T) (float64, error) {
	t.Helper()
	for i := range p.n { // x ≥ 0: Convert makes variables free
		row := make([]float64, p.n)
		row[i] = -1
		p.le(row, 0)
	}
	var A mat.Matrix
	if d := dense(p.a, p.n); d != nil {
		A = d
	}
	c, a, b := lp.Convert(p.c, dense(p.g, p.n), p.h, A, p.b)
	f, _, err := lp.Simplex(c, a, b, 1e-10, nil)
	return f, err
}

// TestRelaxationMatchesSimplex solves the literal LP relaxation of Eq. (1)
// with gonum's simplex and checks it equals ΣD/ΣA.
func TestRelaxationMatchesSimplex(t *testing.T) {
	for seed := uint64(0); seed < 12; seed++ {
		m, err := Generate(GenConfig{Brokers: 2 + int(seed%3), Clusters: 3 + int(seed%4), VPCs: 8, Tenants: 3, K: 1 + int(seed%2), CapacitySkew: 5, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		in := compile(m)
		nB, nC, nT := in.nB, in.nC, len(in.clustersOf)
		z := func(c, b int) int { return c*nB + b }
		y := func(tt, b int) int { return nC*nB + tt*nB + b }
		lam := nC*nB + nT*nB
		p := &lpProblem{n: lam + 1, c: make([]float64, lam+1)}
		p.c[lam] = 1
		row := func() []float64 { return make([]float64, p.n) }
		for c := range nC {
			r := row()
			for b := range nB {
				r[z(c, b)] = 1
			}
			p.eq(r, 1)
		}
		for tt, cs := range in.clustersOf {
			for _, c := range cs {
				for b := range nB {
					r := row()
					r[z(c, b)], r[y(tt, b)] = 1, -1
					p.le(r, 0)
				}
			}
			r := row()
			for b := range nB {
				r[y(tt, b)] = 1
				r1 := row()
				r1[y(tt, b)] = 1
				p.le(r1, 1)
			}
			p.le(r, float64(in.k))
		}
		for b := range nB {
			r := row()
			for c := range nC {
				r[z(c, b)] = in.demand[c]
			}
			r[lam] = -in.capacity[b]
			p.le(r, 0)
		}
		got, err := p.solve(t)
		if err != nil {
			t.Fatalf("seed %d: simplex: %v", seed, err)
		}
		if want := RelaxationBound(m); math.Abs(got-want) > 1e-7*want {
			t.Errorf("seed %d: simplex λ = %v, RelaxationBound = %v", seed, got, want)
		}
	}
}

// TestFlowMatchesSimplex checks the max-flow feasibility test against the
// pruned assignment LP solved by simplex, at λ just above and below the bound.
func TestFlowMatchesSimplex(t *testing.T) {
	for seed := uint64(0); seed < 12; seed++ {
		m, err := Generate(GenConfig{Brokers: 2 + int(seed%3), Clusters: 3 + int(seed%5), VPCs: 10, Tenants: 4, K: 3, CapacitySkew: 8, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		in := compile(m)
		lb, _ := lowerBound(in, 1e-9)
		for _, f := range []float64{0.97, 0.999, 1.001, 1.03, 1.5} {
			lambda := lb * f
			_, flowOK := newFlowGraph(in).feasible(lambda)
			// min μ s.t. Σ_b z = 1 over allowed pairs, Σ_c D z ≤ μ A(b).
			var pairs [][2]int
			for c, d := range in.demand {
				for b, a := range in.capacity {
					if d <= lambda*a*(1+1e-12) {
						pairs = append(pairs, [2]int{c, b})
					}
				}
			}
			n := len(pairs) + 1
			p := &lpProblem{n: n, c: make([]float64, n)}
			p.c[n-1] = 1
			lpOK := true
			for c := range in.nC {
				r := make([]float64, n)
				var any bool
				for i, pr := range pairs {
					if pr[0] == c {
						r[i], any = 1, true
					}
				}
				if !any {
					lpOK = false
				}
				p.eq(r, 1)
			}
			if lpOK {
				for b := range in.nB {
					r := make([]float64, n)
					for i, pr := range pairs {
						if pr[1] == b {
							r[i] = in.demand[pr[0]]
						}
					}
					r[n-1] = -in.capacity[b]
					p.le(r, 0)
				}
				mu, err := p.solve(t)
				if err != nil {
					t.Fatalf("seed %d λ×%v: simplex: %v", seed, f, err)
				}
				lpOK = mu <= lambda*(1+1e-9)
			}
			if lpOK != flowOK {
				t.Errorf("seed %d λ=%v (bound×%v): simplex feasible %v, flow feasible %v", seed, lambda, f, lpOK, flowOK)
			}
		}
	}
}

func BenchmarkLowerBound(b *testing.B) {
	m, err := Generate(GenConfig{Brokers: 100, Clusters: 1000, VPCs: 10000, CapacitySkew: 4, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		LowerBound(m, 0)
	}
}

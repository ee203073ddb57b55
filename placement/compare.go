package placement

import (
	"fmt"
	"io"
	"time"
)

// Row is one line of the comparison of RBCM with the greedy baseline.
type Row struct {
	Gen GenConfig
	// Relax is ΣD/ΣA (LP of Eq. (1)); Bound is the strengthened LP bound.
	Relax, Bound float64
	// RBCM is λ of Solve; Rounded is λ after rounding+repair, before polish.
	RBCM, Rounded, Greedy float64
	// Repaired is how many of the roundings needed repair.
	Repaired, Rounds    int
	BoundTime, RBCMTime time.Duration
	GreedyTime          time.Duration
}

// Compare generates the instance and runs the bound, RBCM and greedy on it,
// checking every assignment with Evaluate. RBCMTime includes the bound.
func Compare(g GenConfig, cfg Config) (Row, error) {
	m, err := Generate(g)
	if err != nil {
		return Row{}, err
	}
	r := Row{Gen: g, Rounds: cfg.rounds()}
	t0 := time.Now()
	r.Bound = LowerBound(m, cfg.Tolerance)
	r.BoundTime = time.Since(t0)
	t0 = time.Now()
	res, err := Solve(m, cfg)
	r.RBCMTime = time.Since(t0)
	if err != nil {
		return r, err
	}
	t0 = time.Now()
	gr, err := Greedy(m)
	r.GreedyTime = time.Since(t0)
	if err != nil {
		return r, err
	}
	for name, a := range map[string]Assignment{"rbcm": res.Assignment, "greedy": gr.Assignment} {
		if _, err := Evaluate(m, a); err != nil {
			return r, fmt.Errorf("%s: %w", name, err)
		}
	}
	r.Relax, r.RBCM, r.Rounded, r.Greedy, r.Repaired = res.RelaxationBound, res.MaxLoad, res.RoundedMaxLoad, gr.MaxLoad, res.Repaired
	return r, nil
}

// WriteTable prints rows as an aligned text table; ratios are to Bound.
func WriteTable(w io.Writer, rows []Row) error {
	if _, err := fmt.Fprintf(w, "%-16s %3s %4s %5s %8s %8s %8s %7s %7s %7s %7s %9s %9s %9s\n",
		"B×C×V", "k", "reg", "skew", "ΣD/ΣA", "LPbound", "RBCM", "ratio", "round", "greedy", "repair", "t_bound", "t_rbcm", "t_greedy"); err != nil {
		return err
	}
	for _, r := range rows {
		k := r.Gen.K
		if k == 0 {
			k = 3
		}
		_, err := fmt.Fprintf(w, "%-16s %3d %4d %5.1f %8.4f %8.4f %8.4f %7.3f %7.3f %7.3f %3d/%-3d %9s %9s %9s\n",
			fmt.Sprintf("%d×%d×%d", r.Gen.Brokers, r.Gen.Clusters, r.Gen.VPCs), k, r.Gen.Region, r.Gen.CapacitySkew,
			r.Relax, r.Bound, r.RBCM, r.RBCM/r.Bound, r.Rounded/r.Bound, r.Greedy/r.Bound,
			r.Repaired, r.Rounds,
			r.BoundTime.Round(time.Microsecond), r.RBCMTime.Round(time.Microsecond), r.GreedyTime.Round(time.Microsecond))
		if err != nil {
			return err
		}
	}
	return nil
}

// StandardSizes are the instance sizes of the issue, small to large.
func StandardSizes(seed uint64) []GenConfig {
	var gs []GenConfig
	for _, s := range [][3]int{{10, 10, 100}, {10, 100, 1000}, {20, 200, 2000}, {50, 500, 5000}, {100, 1000, 10000}, {100, 100, 10000}} {
		for _, k := range []int{1, 3} {
			gs = append(gs, GenConfig{Brokers: s[0], Clusters: s[1], VPCs: s[2], K: k, CapacitySkew: 4, Seed: seed})
		}
		for _, k := range []int{1, 2} {
			gs = append(gs, GenConfig{Brokers: s[0], Clusters: s[1], VPCs: s[2], K: k, CapacitySkew: 4, Region: 5, Seed: seed})
		}
	}
	return gs
}

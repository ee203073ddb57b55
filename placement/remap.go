package placement

// RemapStats says what Remap changed.
type RemapStats struct {
	// Moved counts clusters present before and after whose broker changed
	// (including those whose broker left).
	Moved int
	// Kept counts clusters that stayed on their broker; New counts clusters
	// absent from prev.
	Kept, New int
	// MaxLoad is λ of the returned assignment, FreshMaxLoad that of Solve
	// on the new model ignoring prev.
	MaxLoad, FreshMaxLoad float64
	// Fresh is true when keeping clusters in place could not get within
	// Slack of the fresh solution and the fresh one was returned.
	Fresh bool
}

// Remap recomputes the mapping for a changed model (brokers or clusters
// joined or left, demands changed) with minimal churn: it solves the new
// model from scratch to learn the achievable λ, then starts from prev,
// places only the clusters that lost their broker or are new (greedily,
// largest first), repairs, and moves further clusters only while the max
// load exceeds (1+Slack)·λ_fresh. If that cannot get there, it returns the
// fresh solution.
func Remap(prev Assignment, m *Model, cfg Config) (Assignment, RemapStats, error) {
	if err := m.Validate(); err != nil {
		return nil, RemapStats{}, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, RemapStats{}, err
	}
	in := compile(m)
	fresh, fres := solve(in, cfg)
	target := fres.MaxLoad * (1 + cfg.slack())

	s := newState(in)
	var todo []int
	for c, id := range in.clusterID {
		if b, ok := in.brokerIdx[prev[id]]; ok {
			s.place(c, b)
		} else {
			todo = append(todo, c)
		}
	}
	// A prev that already breaks the tenant constraint (K lowered) is
	// repaired like a rounding.
	sortByDemand(in, todo)
	for _, c := range todo {
		s.place(c, s.leastLoaded(c, nil))
	}
	s.repair()
	s.polish(target, 50*in.nC+100)

	st := RemapStats{FreshMaxLoad: fres.MaxLoad}
	final := s
	if l, _ := s.maxLoad(); l > target {
		final, st.Fresh = fresh, true
	}
	st.MaxLoad, _ = final.maxLoad()
	for c, id := range in.clusterID {
		p, ok := prev[id]
		switch {
		case !ok:
			st.New++
		case in.brokerID[final.broker[c]] == p:
			st.Kept++
		default:
			st.Moved++
		}
	}
	return in.assignment(final.broker), st, nil
}

package placement

// contract handles K = 1 exactly: a tenant on one broker forces all its
// clusters onto one broker, and so, transitively, every cluster linked to
// them through shared tenants. Each such component then behaves like one big
// cluster, and the problem is makespan scheduling of components. Solving
// (and bounding) the contracted instance is both faster and much tighter: the
// LP of the uncontracted instance cannot see the coupling at all.
// For K > 1 it returns in unchanged and comp == nil.
func contract(in *instance) (out *instance, comp []int) {
	if in.k > 1 {
		return in, nil
	}
	s := newState(in)
	s.components()
	out = &instance{nB: in.nB, nC: len(s.members), k: 1, capacity: in.capacity,
		demand: make([]float64, len(s.members)), clustersOf: make([][]int, len(in.clustersOf)),
		tenantsOf: make([][]int, len(s.members)), brokerID: in.brokerID, tenantID: in.tenantID}
	for c, d := range in.demand {
		out.demand[s.compOf[c]] += d
	}
	for t, cs := range in.clustersOf {
		if len(cs) > 0 {
			k := s.compOf[cs[0]]
			out.clustersOf[t] = []int{k}
			out.tenantsOf[k] = append(out.tenantsOf[k], t)
		}
	}
	return out, s.compOf
}

// expand maps a state of the contracted instance back to in.
func expand(in *instance, comp []int, cs *state) *state {
	s := newState(in)
	for c := range in.demand {
		s.place(c, cs.broker[comp[c]])
	}
	return s
}

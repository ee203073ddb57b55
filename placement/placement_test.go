package placement

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestModelValidate(t *testing.T) {
	ok := func() *Model {
		return &Model{K: 1,
			Brokers:  []Broker{{ID: "b0", Capacity: 1}},
			Clusters: []Cluster{{ID: "c0"}},
			Tenants:  []Tenant{{ID: "t0", VPCs: []VPC{{ID: "v0", Cluster: "c0", Demand: 1}}}},
		}
	}
	tests := []struct {
		name   string
		mutate func(*Model)
		field  string // "" means valid
	}{
		{"valid", func(*Model) {}, ""},
		{"no brokers", func(m *Model) { m.Brokers = nil }, "model.Brokers"},
		{"k zero", func(m *Model) { m.K = 0 }, "model.K"},
		{"k above brokers is fine", func(m *Model) { m.K = 9 }, ""},
		{"broker id empty", func(m *Model) { m.Brokers[0].ID = "" }, "model.Brokers[0].ID"},
		{"broker dup", func(m *Model) { m.Brokers = append(m.Brokers, m.Brokers[0]) }, "model.Brokers[1].ID"},
		{"capacity zero", func(m *Model) { m.Brokers[0].Capacity = 0 }, "model.Brokers[0].Capacity"},
		{"capacity NaN", func(m *Model) { m.Brokers[0].Capacity = math.NaN() }, "model.Brokers[0].Capacity"},
		{"capacity Inf", func(m *Model) { m.Brokers[0].Capacity = math.Inf(1) }, "model.Brokers[0].Capacity"},
		{"cluster dup", func(m *Model) { m.Clusters = append(m.Clusters, m.Clusters[0]) }, "model.Clusters[1].ID"},
		{"tenant empty id", func(m *Model) { m.Tenants[0].ID = "" }, "model.Tenants[0].ID"},
		{"vpc unknown cluster", func(m *Model) { m.Tenants[0].VPCs[0].Cluster = "nope" }, "model.Tenants[0].VPCs[0].Cluster"},
		{"vpc negative demand", func(m *Model) { m.Tenants[0].VPCs[0].Demand = -1 }, "model.Tenants[0].VPCs[0].Demand"},
		{"vpc dup", func(m *Model) {
			m.Tenants = append(m.Tenants, Tenant{ID: "t1", VPCs: []VPC{{ID: "v0", Cluster: "c0"}}})
		}, "model.Tenants[1].VPCs[0].ID"},
		{"empty cluster is fine", func(m *Model) { m.Clusters = append(m.Clusters, Cluster{ID: "c1"}) }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ok()
			tc.mutate(m)
			err := m.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Fatalf("Validate = %v, want error naming %s", err, tc.field)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, ""},
		{Config{Rounds: -1}, "config.Rounds"},
		{Config{Tolerance: 0.5}, "config.Tolerance"},
		{Config{Slack: math.NaN()}, "config.Slack"},
	} {
		err := tc.cfg.Validate()
		if (tc.field == "") != (err == nil) || (err != nil && !strings.HasPrefix(err.Error(), tc.field)) {
			t.Errorf("%+v: Validate = %v, want %q", tc.cfg, err, tc.field)
		}
	}
}

func TestEvaluate(t *testing.T) {
	m := &Model{K: 1,
		Brokers:  []Broker{{ID: "b0", Capacity: 2}, {ID: "b1", Capacity: 1}},
		Clusters: []Cluster{{ID: "c0"}, {ID: "c1"}},
		Tenants: []Tenant{{ID: "t0", VPCs: []VPC{
			{ID: "v0", Cluster: "c0", Demand: 3}, {ID: "v1", Cluster: "c1", Demand: 1}}}},
	}
	e, err := Evaluate(m, Assignment{"c0": "b0", "c1": "b0"})
	if err != nil || !reflect.DeepEqual(e.Load, []float64{2, 0}) || e.MaxLoad != 2 || e.MaxTenantBrokers != 1 {
		t.Fatalf("Evaluate = %+v, %v", e, err)
	}
	for _, tc := range []struct {
		a    Assignment
		want string
	}{
		{Assignment{"c0": "b0", "c1": "b1"}, `tenant "t0": on 2 brokers, K is 1`},
		{Assignment{"c0": "b0"}, `cluster "c1": not assigned`},
		{Assignment{"c0": "b0", "c1": "bx"}, `cluster "c1": broker "bx" is not in the model`},
		{Assignment{"c0": "b0", "c1": "b0", "c9": "b0"}, `cluster "c9": assigned but not in the model`},
	} {
		if _, err := Evaluate(m, tc.a); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Evaluate(%v) = %v, want %q", tc.a, err, tc.want)
		}
	}
}

// randomModels covers tight K = 1, very unequal capacities, empty clusters
// and a single broker.
func randomModels(t *testing.T, n int) []*Model {
	t.Helper()
	var ms []*Model
	for i := range n {
		s := uint64(i)
		g := GenConfig{
			Brokers:      1 + int(s*7%23),
			Clusters:     1 + int(s*13%61),
			VPCs:         int(s * 31 % 400),
			K:            1 + int(s%4),
			CapacitySkew: []float64{1, 4, 100, 1000}[s%4],
			Span:         1 + int(s%6),
			Seed:         s,
		}
		if i%5 == 0 {
			g.Tenants = 1 + int(s%7) // few tenants spanning many clusters
		}
		m, err := Generate(g)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	return ms
}

func TestConstraintsAlwaysHold(t *testing.T) {
	for i, m := range randomModels(t, 120) {
		lb := LowerBound(m, 0)
		if r := RelaxationBound(m); lb < r*(1-1e-9) {
			t.Errorf("model %d: LowerBound %v < RelaxationBound %v", i, lb, r)
		}
		for _, cfg := range []Config{{Seed: uint64(i)}, {Seed: uint64(i), NoPolish: true, Rounds: 1}} {
			res, err := Solve(m, cfg)
			if err != nil {
				t.Fatal(err)
			}
			e, err := Evaluate(m, res.Assignment)
			if err != nil {
				t.Fatalf("model %d %+v: RBCM infeasible: %v", i, cfg, err)
			}
			if math.Abs(e.MaxLoad-res.MaxLoad) > 1e-9*max(1, e.MaxLoad) {
				t.Errorf("model %d: Result.MaxLoad %v, Evaluate %v", i, res.MaxLoad, e.MaxLoad)
			}
			if e.MaxLoad < lb*(1-1e-6) {
				t.Errorf("model %d: RBCM %v below LowerBound %v", i, e.MaxLoad, lb)
			}
		}
		g, err := Greedy(m)
		if err != nil {
			t.Fatal(err)
		}
		// Remap from greedy's assignment to the model without its first
		// broker (if it has another) and with K tightened to 1 every third time.
		m2 := *m
		if len(m.Brokers) > 1 {
			m2.Brokers = m.Brokers[1:]
		}
		if i%3 == 0 {
			m2.K = 1
		}
		a2, st, err := Remap(g.Assignment, &m2, Config{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if e2, err := Evaluate(&m2, a2); err != nil {
			t.Fatalf("model %d: Remap infeasible: %v", i, err)
		} else if e2.MaxLoad > st.FreshMaxLoad*1.05*(1+1e-9) {
			t.Errorf("model %d: Remap λ %v > 1.05 × fresh %v", i, e2.MaxLoad, st.FreshMaxLoad)
		}
		e, err := Evaluate(m, g.Assignment)
		if err != nil {
			t.Fatalf("model %d: greedy infeasible: %v", i, err)
		}
		if e.MaxLoad < lb*(1-1e-6) {
			t.Errorf("model %d: greedy %v below LowerBound %v", i, e.MaxLoad, lb)
		}
	}
}

func TestDeterministic(t *testing.T) {
	m, err := Generate(GenConfig{Brokers: 20, Clusters: 200, VPCs: 2000, CapacitySkew: 4, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := Solve(m, Config{Seed: 42, NoPolish: true})
	b, _ := Solve(m, Config{Seed: 42, NoPolish: true})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different results")
	}
	m2, _ := Generate(GenConfig{Brokers: 20, Clusters: 200, VPCs: 2000, CapacitySkew: 4, Seed: 7})
	if !reflect.DeepEqual(m, m2) {
		t.Fatal("Generate: same seed, different models")
	}
}

// TestRBCMWithinTarget is the goal on the instances of the normal
// test run (the large ones are in TestCompare behind an env var).
func TestRBCMWithinTarget(t *testing.T) {
	for _, g := range StandardSizes(1)[:8] {
		m, err := Generate(g)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Solve(m, Config{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r := res.MaxLoad / res.LowerBound; r > 1.2 {
			t.Logf("%+v: RBCM/LP = %.3f > 1.2", g, r)
			if g.Clusters >= 10*g.Brokers {
				t.Errorf("%+v: RBCM/LP = %.3f > 1.2", g, r)
			}
		}
	}
}

func TestRemapChurn(t *testing.T) {
	base := GenConfig{Brokers: 20, Clusters: 400, VPCs: 4000, CapacitySkew: 4, Seed: 3}
	m, err := Generate(base)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Solve(m, Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("unchanged", func(t *testing.T) {
		_, st, err := Remap(res.Assignment, m, Config{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if st.Moved != 0 {
			t.Errorf("no change moved %d clusters: %+v", st.Moved, st)
		}
	})
	t.Run("add broker", func(t *testing.T) {
		m2 := *m
		m2.Brokers = append(append([]Broker(nil), m.Brokers...), Broker{ID: "new", Capacity: 2})
		a, st, err := Remap(res.Assignment, &m2, Config{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Evaluate(&m2, a); err != nil {
			t.Fatal(err)
		}
		t.Logf("add: %+v", st)
		if st.Fresh || st.Moved > len(m.Clusters)/4 {
			t.Errorf("add broker moved too much: %+v", st)
		}
		if st.MaxLoad > st.FreshMaxLoad*1.05+1e-9 {
			t.Errorf("add broker: load %v above 1.05 × fresh %v", st.MaxLoad, st.FreshMaxLoad)
		}
	})
	t.Run("add broker tight slack", func(t *testing.T) {
		m2 := *m
		m2.Brokers = append(append([]Broker(nil), m.Brokers...), Broker{ID: "new", Capacity: 2})
		a, st, err := Remap(res.Assignment, &m2, Config{Seed: 1, Slack: 0.001})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Evaluate(&m2, a); err != nil {
			t.Fatal(err)
		}
		fresh, err := Solve(&m2, Config{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		freshMoved := 0
		for c, b := range res.Assignment {
			if fresh.Assignment[c] != b {
				freshMoved++
			}
		}
		t.Logf("add, slack 0.1%%: %+v; solving from scratch would move %d", st, freshMoved)
		if st.MaxLoad > st.FreshMaxLoad*1.001+1e-9 {
			t.Errorf("load %v above 1.001 × fresh %v", st.MaxLoad, st.FreshMaxLoad)
		}
		if !st.Fresh && st.Moved > len(m.Clusters)/4 {
			t.Errorf("moved too much: %+v", st)
		}
	})
	t.Run("remove broker", func(t *testing.T) {
		gone := res.Assignment[m.Clusters[0].ID]
		m2 := *m
		m2.Brokers = nil
		for _, b := range m.Brokers {
			if b.ID != gone {
				m2.Brokers = append(m2.Brokers, b)
			}
		}
		orphans := 0
		for _, b := range res.Assignment {
			if b == gone {
				orphans++
			}
		}
		a, st, err := Remap(res.Assignment, &m2, Config{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Evaluate(&m2, a); err != nil {
			t.Fatal(err)
		}
		t.Logf("remove: orphans %d, %+v", orphans, st)
		if st.Moved < orphans || st.Moved > 4*orphans+len(m.Clusters)/10 {
			t.Errorf("remove broker: %d orphans but moved %d", orphans, st.Moved)
		}
	})
}

func BenchmarkRemap(b *testing.B) {
	m, err := Generate(GenConfig{Brokers: 100, Clusters: 1000, VPCs: 10000, CapacitySkew: 4, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	res, err := Solve(m, Config{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	m2 := *m
	m2.Brokers = m.Brokers[1:]
	for b.Loop() {
		if _, _, err := Remap(res.Assignment, &m2, Config{Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestExactSmall enumerates every assignment of tiny instances: the LP
// bound is below the integral optimum, and RBCM's gap to the optimum is
// logged (and must stay within 1.5× on these).
func TestExactSmall(t *testing.T) {
	var worst, gap float64
	for seed := uint64(0); seed < 60; seed++ {
		m, err := Generate(GenConfig{Brokers: 2 + int(seed%3), Clusters: 3 + int(seed%4), VPCs: 12, Tenants: 2 + int(seed%4),
			K: 1 + int(seed%2), CapacitySkew: 1 + float64(seed%5), Span: 2, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		in := compile(m)
		s := newState(in)
		opt := math.Inf(1)
		var rec func(c int)
		rec = func(c int) {
			if c == in.nC {
				if len(s.violated()) == 0 {
					l, _ := s.maxLoad()
					opt = min(opt, l)
				}
				return
			}
			for b := range in.nB {
				s.place(c, b)
				rec(c + 1)
			}
			s.place(c, -1)
		}
		rec(0)
		lb := LowerBound(m, 1e-9)
		if lb > opt*(1+1e-6) {
			t.Errorf("seed %d: LowerBound %v > optimum %v", seed, lb, opt)
		}
		res, err := Solve(m, Config{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		if res.MaxLoad < opt*(1-1e-9) {
			t.Errorf("seed %d: RBCM %v below optimum %v", seed, res.MaxLoad, opt)
		}
		worst = max(worst, res.MaxLoad/opt)
		gap = max(gap, opt/lb)
	}
	t.Logf("worst RBCM/optimum over 60 tiny instances: %.3f; worst optimum/LowerBound: %.3f", worst, gap)
	if worst > 1.5 {
		t.Errorf("RBCM/optimum %.3f > 1.5", worst)
	}
}

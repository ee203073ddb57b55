package placement

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzModel builds a model from fuzz bytes (including invalid values) and
// checks that Validate never panics and that every valid model gets feasible
// RBCM and greedy assignments.
func FuzzModel(f *testing.F) {
	f.Add([]byte{3, 4, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{1, 1, 1, 0})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{8, 16, 2, 1, 255, 0, 0, 0, 0, 0, 0xf8, 0x7f, 9, 9, 9, 9, 1, 2})
	// Capacities from 1e-76 to 6e116 and a 8e-202 demand put the bisection's
	// bounds in subnormal range, where it once looped for ever.
	f.Add([]byte("0X$10000\xff000000100100100000000000000000000X000000000010000000d0\x16"))
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		nextF := func() float64 {
			if len(data) >= 9 && next()%4 == 0 {
				v := math.Float64frombits(binary.LittleEndian.Uint64(data))
				data = data[8:]
				return v
			}
			return float64(next()) / 16
		}
		m := &Model{K: int(next()%5) - 1}
		nB, nC, nT := int(next()%9), int(next()%17), int(next()%6)
		names := []string{"a", "b", "c", "d", "", "a"}
		for i := range nB {
			id := string(rune('A' + i))
			if next()%31 == 0 {
				id = names[i%len(names)]
			}
			m.Brokers = append(m.Brokers, Broker{ID: id, Capacity: nextF()})
		}
		for i := range nC {
			m.Clusters = append(m.Clusters, Cluster{ID: string(rune('a' + i))})
		}
		for i := range nT {
			tn := Tenant{ID: string(rune('0' + i))}
			for j := range int(next() % 8) {
				c := "zz"
				if nC > 0 {
					c = string(rune('a' + int(next())%(nC+1)))
				}
				tn.VPCs = append(tn.VPCs, VPC{ID: string(rune('0'+i)) + string(rune('a'+j)), Cluster: c, Demand: nextF()})
			}
			m.Tenants = append(m.Tenants, tn)
		}
		if err := m.Validate(); err != nil {
			return
		}
		res, err := Solve(m, Config{Seed: 1, Rounds: 2})
		if err != nil {
			t.Fatalf("Solve on valid model: %v", err)
		}
		if _, err := Evaluate(m, res.Assignment); err != nil {
			t.Fatalf("RBCM infeasible: %v", err)
		}
		g, err := Greedy(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Evaluate(m, g.Assignment); err != nil {
			t.Fatalf("greedy infeasible: %v", err)
		}
	})
}

func BenchmarkSolve(b *testing.B) {
	m, err := Generate(GenConfig{Brokers: 100, Clusters: 1000, VPCs: 10000, CapacitySkew: 4, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Solve(m, Config{Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGreedy(b *testing.B) {
	m, err := Generate(GenConfig{Brokers: 100, Clusters: 1000, VPCs: 10000, CapacitySkew: 4, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Greedy(m); err != nil {
			b.Fatal(err)
		}
	}
}

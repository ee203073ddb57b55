package placement

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// GenConfig describes a random instance for tests and the comparison.
type GenConfig struct {
	Brokers, Clusters, VPCs int
	// Tenants defaults to max(1, VPCs/10).
	Tenants int
	// K defaults to 3.
	K int
	// CapacitySkew is max/min broker capacity; capacities are log-uniform in
	// [1, CapacitySkew]. 0 or 1 means equal capacities.
	CapacitySkew float64
	// Span is the mean number of clusters a tenant's VPCs spread over
	// (default 3). A tenant takes consecutive clusters from a random start,
	// so tenants overlap like neighbours in a region.
	Span int
	// Region, if > 0, cuts the clusters into consecutive regions of this
	// many clusters and keeps each tenant inside one region, so clusters
	// linked by shared tenants stay local (0: one ring of all clusters).
	Region int
	Seed   uint64
}

// Validate names the first bad field.
func (g GenConfig) Validate() error {
	switch {
	case g.Brokers < 1:
		return fmt.Errorf("gen.Brokers: %d, must be >= 1", g.Brokers)
	case g.Clusters < 1:
		return fmt.Errorf("gen.Clusters: %d, must be >= 1", g.Clusters)
	case g.VPCs < 0:
		return fmt.Errorf("gen.VPCs: %d, must be >= 0", g.VPCs)
	case g.Tenants < 0:
		return fmt.Errorf("gen.Tenants: %d, must be >= 0", g.Tenants)
	case g.K < 0:
		return fmt.Errorf("gen.K: %d, must be >= 0", g.K)
	case g.Region < 0:
		return fmt.Errorf("gen.Region: %d, must be >= 0", g.Region)
	case g.Span < 0:
		return fmt.Errorf("gen.Span: %d, must be >= 0", g.Span)
	case !(g.CapacitySkew >= 0) || math.IsInf(g.CapacitySkew, 0):
		return fmt.Errorf("gen.CapacitySkew: %v, must be finite and >= 0", g.CapacitySkew)
	}
	return nil
}

// Generate builds a valid model. VPC demands are log-normal (σ = 1), so a few
// VPCs are heavy, as tenants are in practice.
func Generate(g GenConfig) (*Model, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(g.Seed, 0x5eed))
	nT := g.Tenants
	if nT == 0 {
		nT = max(1, g.VPCs/10)
	}
	k := g.K
	if k == 0 {
		k = 3
	}
	span := g.Span
	if span == 0 {
		span = 3
	}
	m := &Model{K: k}
	for i := range g.Brokers {
		c := 1.0
		if g.CapacitySkew > 1 {
			c = math.Exp(rng.Float64() * math.Log(g.CapacitySkew))
		}
		m.Brokers = append(m.Brokers, Broker{ID: fmt.Sprintf("b%03d", i), Capacity: c})
	}
	for i := range g.Clusters {
		m.Clusters = append(m.Clusters, Cluster{ID: fmt.Sprintf("c%04d", i)})
	}
	homes := make([][]string, nT)
	for t := range nT {
		m.Tenants = append(m.Tenants, Tenant{ID: fmt.Sprintf("t%04d", t)})
		s := 1 + rng.IntN(2*span-1) // mean span
		lo, n := 0, g.Clusters
		if g.Region > 0 && g.Region < g.Clusters {
			lo = rng.IntN((g.Clusters+g.Region-1)/g.Region) * g.Region
			n = min(g.Region, g.Clusters-lo)
		}
		start := rng.IntN(n)
		for j := range min(s, n) {
			homes[t] = append(homes[t], m.Clusters[lo+(start+j)%n].ID)
		}
	}
	for v := range g.VPCs {
		t := v % nT
		if v >= nT {
			t = rng.IntN(nT)
		}
		h := homes[t]
		m.Tenants[t].VPCs = append(m.Tenants[t].VPCs, VPC{
			ID:      fmt.Sprintf("v%05d", v),
			Cluster: h[rng.IntN(len(h))],
			Demand:  math.Exp(rng.NormFloat64()),
		})
	}
	return m, nil
}

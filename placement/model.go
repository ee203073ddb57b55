package placement

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// Broker is a broker b with its data synchronization capacity A(b).
type Broker struct {
	ID       string
	Capacity float64
}

// Cluster is a worker cluster c. Its demand is the sum of f(v) over the VPCs
// that live in it.
type Cluster struct {
	ID string
}

// VPC is a VPC v of a tenant with traffic demand f(v), living in one cluster
// (the paper's x_v^c, fixed by where the VPC runs: Algorithm 1 line 3).
type VPC struct {
	ID      string
	Cluster string
	Demand  float64
}

// Tenant is a tenant t with its VPCs V^t.
type Tenant struct {
	ID   string
	VPCs []VPC
}

// Model is one BCM instance. K is the tenant constraint: every tenant's
// clusters together may use at most K brokers.
type Model struct {
	Brokers  []Broker
	Clusters []Cluster
	Tenants  []Tenant
	K        int
}

// Validate reports the first problem with the model, naming the field.
func (m *Model) Validate() error {
	if m == nil {
		return errors.New("model: nil")
	}
	if len(m.Brokers) == 0 {
		return errors.New("model.Brokers: empty, need at least one broker")
	}
	if m.K < 1 {
		return fmt.Errorf("model.K: %d, must be >= 1", m.K)
	}
	seen := make(map[string]bool, len(m.Brokers))
	for i, b := range m.Brokers {
		if b.ID == "" {
			return fmt.Errorf("model.Brokers[%d].ID: empty", i)
		}
		if seen[b.ID] {
			return fmt.Errorf("model.Brokers[%d].ID: duplicate %q", i, b.ID)
		}
		seen[b.ID] = true
		if !(b.Capacity > 0) || math.IsInf(b.Capacity, 0) {
			return fmt.Errorf("model.Brokers[%d].Capacity: %v, must be finite and > 0", i, b.Capacity)
		}
	}
	clusters := make(map[string]bool, len(m.Clusters))
	for i, c := range m.Clusters {
		if c.ID == "" {
			return fmt.Errorf("model.Clusters[%d].ID: empty", i)
		}
		if clusters[c.ID] {
			return fmt.Errorf("model.Clusters[%d].ID: duplicate %q", i, c.ID)
		}
		clusters[c.ID] = true
	}
	tenants := make(map[string]bool, len(m.Tenants))
	vpcs := make(map[string]bool)
	for i, t := range m.Tenants {
		if t.ID == "" {
			return fmt.Errorf("model.Tenants[%d].ID: empty", i)
		}
		if tenants[t.ID] {
			return fmt.Errorf("model.Tenants[%d].ID: duplicate %q", i, t.ID)
		}
		tenants[t.ID] = true
		for j, v := range t.VPCs {
			if v.ID == "" {
				return fmt.Errorf("model.Tenants[%d].VPCs[%d].ID: empty", i, j)
			}
			if vpcs[v.ID] {
				return fmt.Errorf("model.Tenants[%d].VPCs[%d].ID: duplicate %q", i, j, v.ID)
			}
			vpcs[v.ID] = true
			if !clusters[v.Cluster] {
				return fmt.Errorf("model.Tenants[%d].VPCs[%d].Cluster: %q is not in model.Clusters", i, j, v.Cluster)
			}
			if !(v.Demand >= 0) || math.IsInf(v.Demand, 0) {
				return fmt.Errorf("model.Tenants[%d].VPCs[%d].Demand: %v, must be finite and >= 0", i, j, v.Demand)
			}
		}
	}
	var total, minCap float64
	minCap = math.Inf(1)
	for _, t := range m.Tenants {
		for _, v := range t.VPCs {
			total += v.Demand
		}
	}
	for _, b := range m.Brokers {
		minCap = min(minCap, b.Capacity)
	}
	if math.IsInf(total/minCap, 0) {
		return fmt.Errorf("model.Tenants: total demand %v over smallest capacity %v overflows float64", total, minCap)
	}
	return nil
}

// Assignment maps cluster ID to broker ID (the paper's z_c^b = 1).
type Assignment map[string]string

// Eval is an assignment measured against a model.
type Eval struct {
	// Load is λ_b = (sum of f(v) of the VPCs of the clusters on b) / A(b),
	// indexed like Model.Brokers.
	Load []float64
	// MaxLoad is λ = max_b λ_b, the BCM objective.
	MaxLoad float64
	// MaxTenantBrokers is the largest number of brokers one tenant uses.
	MaxTenantBrokers int
}

// Evaluate measures a against m and checks the hard constraints: every
// cluster on exactly one broker of m, no unknown cluster, every tenant on at
// most K brokers. The Eval is filled in even when the error is not nil
// (clusters on unknown brokers are left out of the loads).
func Evaluate(m *Model, a Assignment) (Eval, error) {
	if err := m.Validate(); err != nil {
		return Eval{}, err
	}
	in := compile(m)
	var errs []error
	brokers := make([]int, in.nC)
	for c, id := range in.clusterID {
		bid, ok := a[id]
		if !ok {
			errs = append(errs, fmt.Errorf("cluster %q: not assigned", id))
			brokers[c] = -1
			continue
		}
		b, ok := in.brokerIdx[bid]
		if !ok {
			errs = append(errs, fmt.Errorf("cluster %q: broker %q is not in the model", id, bid))
			brokers[c] = -1
			continue
		}
		brokers[c] = b
	}
	if len(a) > in.nC {
		var extra []string
		for cid := range a {
			if _, ok := in.clusterIdx[cid]; !ok {
				extra = append(extra, cid)
			}
		}
		sort.Strings(extra)
		for _, cid := range extra {
			errs = append(errs, fmt.Errorf("cluster %q: assigned but not in the model", cid))
		}
	}
	e := Eval{Load: in.loads(brokers)}
	for _, l := range e.Load {
		e.MaxLoad = max(e.MaxLoad, l)
	}
	for t, cs := range in.clustersOf {
		used := map[int]bool{}
		for _, c := range cs {
			if brokers[c] >= 0 {
				used[brokers[c]] = true
			}
		}
		e.MaxTenantBrokers = max(e.MaxTenantBrokers, len(used))
		if len(used) > m.K {
			errs = append(errs, fmt.Errorf("tenant %q: on %d brokers, K is %d", in.tenantID[t], len(used), m.K))
		}
	}
	return e, errors.Join(errs...)
}

// instance is a model compiled to indices, the form the algorithms use.
type instance struct {
	nB, nC, k  int
	capacity   []float64 // A(b)
	demand     []float64 // D(c) = sum of f(v), v in V^c
	clustersOf [][]int   // tenant -> distinct clusters, ascending
	tenantsOf  [][]int   // cluster -> distinct tenants, ascending

	brokerID, clusterID, tenantID []string
	brokerIdx, clusterIdx         map[string]int
}

// compile assumes m is valid.
func compile(m *Model) *instance {
	in := &instance{
		nB: len(m.Brokers), nC: len(m.Clusters), k: m.K,
		capacity:   make([]float64, len(m.Brokers)),
		demand:     make([]float64, len(m.Clusters)),
		clustersOf: make([][]int, len(m.Tenants)),
		tenantsOf:  make([][]int, len(m.Clusters)),
		brokerIdx:  make(map[string]int, len(m.Brokers)),
		clusterIdx: make(map[string]int, len(m.Clusters)),
	}
	for i, b := range m.Brokers {
		in.capacity[i] = b.Capacity
		in.brokerID = append(in.brokerID, b.ID)
		in.brokerIdx[b.ID] = i
	}
	for i, c := range m.Clusters {
		in.clusterID = append(in.clusterID, c.ID)
		in.clusterIdx[c.ID] = i
	}
	for t, ten := range m.Tenants {
		in.tenantID = append(in.tenantID, ten.ID)
		seen := map[int]bool{}
		for _, v := range ten.VPCs {
			c := in.clusterIdx[v.Cluster]
			in.demand[c] += v.Demand
			if !seen[c] {
				seen[c] = true
				in.clustersOf[t] = append(in.clustersOf[t], c)
				in.tenantsOf[c] = append(in.tenantsOf[c], t)
			}
		}
		sort.Ints(in.clustersOf[t])
	}
	return in
}

func (in *instance) loads(brokers []int) []float64 {
	l := make([]float64, in.nB)
	for c, b := range brokers {
		if b >= 0 {
			l[b] += in.demand[c]
		}
	}
	for b := range l {
		l[b] /= in.capacity[b]
	}
	return l
}

func (in *instance) maxLoad(brokers []int) float64 {
	var m float64
	for _, l := range in.loads(brokers) {
		m = max(m, l)
	}
	return m
}

func (in *instance) assignment(brokers []int) Assignment {
	a := make(Assignment, in.nC)
	for c, b := range brokers {
		a[in.clusterID[c]] = in.brokerID[b]
	}
	return a
}

package packet

import (
	"fmt"
	"net/netip"

	"github.com/strait-net/strait/policy"
)

// Source is a client address range and the workload it stands for, as in
// the gateway's sources list: the first Source whose Prefix holds an
// address decides its namespace and labels.
type Source struct {
	Prefix    netip.Prefix
	Namespace string
	Labels    map[string]string
}

// ClusterSources is a cluster's ID in policy keys (0 for this cluster) and
// its sources. Addresses no source holds belong to DefaultNamespace.
type ClusterSources struct {
	ID               uint32
	Name             string
	Sources          []Source
	DefaultNamespace string
}

// ServiceRef is an import or export's ID in policy keys and the
// destination policies match it as.
type ServiceRef struct {
	ID   uint32
	Dest policy.Destination
}

// CompilePolicy evaluates the policies once for every (cluster, source,
// service) and returns the policy map's entries, with the names of the
// deciding rules (Rules[v.Rule]; Rules[0] is "" for the default deny).
// The kernel then decides a new flow with one longest-prefix lookup: a
// source shadowed by an earlier one that holds it is left out, so the
// longest matching prefix is always the first matching source.
func CompilePolicy(ev *policy.Evaluator, clusters []ClusterSources, services []ServiceRef) (map[PolicyKey]Verdict, []string, error) {
	entries := map[PolicyKey]Verdict{}
	rules := []string{""}
	ruleIndex := map[string]uint32{"": 0}
	for _, c := range clusters {
		type src struct {
			prefix netip.Prefix
			ns     string
			labels map[string]string
		}
		srcs := []src{{netip.PrefixFrom(netip.IPv4Unspecified(), 0), c.DefaultNamespace, nil}}
		var kept []netip.Prefix
	sources:
		for i, s := range c.Sources {
			p := s.Prefix.Masked()
			if !p.IsValid() || !p.Addr().Unmap().Is4() {
				return nil, nil, fmt.Errorf("cluster %s: sources[%d] %v: want an IPv4 prefix", c.Name, i, s.Prefix)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits())
			for _, k := range kept {
				if k.Bits() <= p.Bits() && k.Contains(p.Addr()) {
					continue sources // an earlier source holds every address of this one
				}
			}
			kept = append(kept, p)
			ns := s.Namespace
			if ns == "" {
				ns = c.DefaultNamespace
			}
			if p.Bits() == 0 {
				srcs[0] = src{p, ns, s.Labels}
				continue
			}
			srcs = append(srcs, src{p, ns, s.Labels})
		}
		for _, svc := range services {
			for _, s := range srcs {
				d := ev.Decide(policy.Source{Cluster: c.Name, Namespace: s.ns, Labels: s.labels}, svc.Dest)
				idx, ok := ruleIndex[d.Policy]
				if !ok {
					idx = uint32(len(rules))
					if idx >= maxRules {
						return nil, nil, fmt.Errorf("policies: more than %d decide flows; the packet mode holds at most that many", maxRules-1)
					}
					rules = append(rules, d.Policy)
					ruleIndex[d.Policy] = idx
				}
				entries[PolicyKey{Cluster: c.ID, Service: svc.ID, Prefix: s.prefix}] = Verdict{Allow: d.Allow, Rule: idx}
			}
		}
	}
	return entries, rules, nil
}

// Package policy decides whether a connection from a source workload to an
// exported service may open, from AccessPolicy resources. It is pure: no
// I/O, no clock; the gateway calls Decide on every new stream, at egress on
// the sending gateway and again at ingress on the receiving one.
//
// Semantics:
//
//   - Policies are ordered by spec.priority, lower number first, as in
//     Kubernetes AdminNetworkPolicy (0 is the highest precedence).
//   - The first policy that matches decides, allow or deny.
//   - At equal priority, deny policies come before allow policies, so a
//     deny wins over an allow of the same priority; policies of the same
//     priority and action are tried by name, which only changes which name
//     a decision reports.
//   - If no policy matches, the connection is denied (default deny).
//
// A policy matches when both its from and to match. Within one side every
// given field must match (AND); an empty list or a missing selector matches
// anything; a list matches if it contains the value (OR). Label selectors
// are Kubernetes label selectors: every matchLabels pair and every
// expression must hold, where In needs the key present with one of the
// values, NotIn holds when the key is absent or its value is none of the
// values, Exists needs the key, DoesNotExist needs it absent.
//
// Compile does all the work that can be done ahead of time; Decide does
// not allocate.
package policy

import (
	"fmt"
	"sort"

	"github.com/strait-net/strait/catalog"
)

// Source is the client side of a connection: the cluster it comes from,
// and the namespace and labels of the workload that opened it.
type Source struct {
	Cluster   string
	Namespace string
	Labels    map[string]string
}

// Destination is the export the connection goes to.
type Destination struct {
	Export    string
	Namespace string
	Labels    map[string]string
}

// Decision is the outcome of Decide.
type Decision struct {
	Allow bool
	// Policy is the name of the deciding policy, "" for the default deny.
	Policy string
	// Reason is a short sentence for logs; it is precomputed, so reading
	// it costs nothing.
	Reason string
}

// DefaultDenyReason is the Reason of a decision no policy made.
const DefaultDenyReason = "no policy matches: default deny"

// Evaluator decides connections against a compiled set of policies. The
// zero value and nil deny everything. An Evaluator is immutable and safe
// for concurrent use; compile a new one when the policies change and swap
// it in (e.g. with atomic.Pointer).
type Evaluator struct {
	rules []rule
	// byCluster lists, per cluster named in some policy, the indices of
	// the rules that can match a source of that cluster, in order; other
	// clusters use anyCluster (the rules without a cluster list). With
	// policies written per peer cluster, as they usually are, Decide then
	// looks at a few rules instead of all of them.
	byCluster  map[string][]int
	anyCluster []int
}

type rule struct {
	priority int32
	decision Decision

	clusters, srcNamespaces strSet
	clusterNames            []string
	workload                selector
	exports, dstNamespaces  strSet
	exportSel               selector
}

// Compile validates the policies and orders them for Decide. Policy names
// must be unique.
func Compile(policies []*catalog.AccessPolicy) (*Evaluator, error) {
	rules := make([]rule, 0, len(policies))
	seen := make(map[string]bool, len(policies))
	for _, p := range policies {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("policy %s: %w", p.Metadata.Name, err)
		}
		if seen[p.Metadata.Name] {
			return nil, fmt.Errorf("policy %s: duplicate name", p.Metadata.Name)
		}
		seen[p.Metadata.Name] = true
		s := p.Spec
		allow := s.Action == catalog.Allow
		verb := "denied"
		if allow {
			verb = "allowed"
		}
		rules = append(rules, rule{
			priority: s.Priority,
			decision: Decision{
				Allow:  allow,
				Policy: p.Metadata.Name,
				Reason: fmt.Sprintf("%s by policy %s (priority %d)", verb, p.Metadata.Name, s.Priority),
			},
			clusters:      newStrSet(s.From.Clusters),
			clusterNames:  s.From.Clusters,
			srcNamespaces: newStrSet(s.From.Namespaces),
			workload:      newSelector(s.From.WorkloadSelector),
			exports:       newStrSet(s.To.Exports),
			dstNamespaces: newStrSet(s.To.Namespaces),
			exportSel:     newSelector(s.To.ExportSelector),
		})
	}
	sort.Slice(rules, func(i, j int) bool {
		if rules[i].priority != rules[j].priority {
			return rules[i].priority < rules[j].priority
		}
		a, b := rules[i].decision, rules[j].decision
		if a.Allow != b.Allow {
			return !a.Allow // deny first
		}
		return a.Policy < b.Policy
	})
	e := &Evaluator{rules: rules, byCluster: map[string][]int{}}
	for _, r := range rules {
		for _, c := range r.clusterNames {
			e.byCluster[c] = nil
		}
	}
	for i := range rules {
		r := &rules[i]
		if r.clusters.any() {
			e.anyCluster = append(e.anyCluster, i)
		}
		for c, idx := range e.byCluster {
			if r.clusters.match(c) {
				e.byCluster[c] = append(idx, i)
			}
		}
		r.clusterNames = nil // only needed to build the index
	}
	return e, nil
}

// Len returns the number of compiled policies.
func (e *Evaluator) Len() int {
	if e == nil {
		return 0
	}
	return len(e.rules)
}

// Decide returns the decision of the first matching policy, or the
// default deny.
func (e *Evaluator) Decide(src Source, dst Destination) Decision {
	if e != nil {
		idx, ok := e.byCluster[src.Cluster]
		if !ok {
			idx = e.anyCluster
		}
		for _, i := range idx {
			r := &e.rules[i]
			// The index has already matched the cluster.
			if r.srcNamespaces.match(src.Namespace) &&
				r.exports.match(dst.Export) &&
				r.dstNamespaces.match(dst.Namespace) &&
				r.workload.match(src.Labels) &&
				r.exportSel.match(dst.Labels) {
				return r.decision
			}
		}
	}
	return Decision{Reason: DefaultDenyReason}
}

// strSet is a set of strings that matches anything when empty. Small sets
// are scanned: for a handful of short strings that beats hashing.
type strSet struct {
	list []string
	m    map[string]struct{}
}

const mapThreshold = 8

func newStrSet(vals []string) strSet {
	if len(vals) > mapThreshold {
		m := make(map[string]struct{}, len(vals))
		for _, v := range vals {
			m[v] = struct{}{}
		}
		return strSet{m: m}
	}
	return strSet{list: append([]string(nil), vals...)}
}

func (s strSet) any() bool { return s.m == nil && len(s.list) == 0 }

// has reports whether v is in the set (false for an empty set).
func (s strSet) has(v string) bool {
	if s.m != nil {
		_, ok := s.m[v]
		return ok
	}
	for _, x := range s.list {
		if x == v {
			return true
		}
	}
	return false
}

// match is has, except that the empty set matches everything.
func (s strSet) match(v string) bool { return s.any() || s.has(v) }

// selector is a compiled label selector; the zero value matches anything.
type selector struct {
	reqs []requirement
}

type requirement struct {
	key    string
	op     catalog.SelectorOperator
	values strSet // In, NotIn; matchLabels become In with one value
}

func newSelector(s *catalog.LabelSelector) selector {
	if s == nil {
		return selector{}
	}
	var sel selector
	// Sorted so that compiled policies do not depend on map order.
	keys := make([]string, 0, len(s.MatchLabels))
	for k := range s.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sel.reqs = append(sel.reqs, requirement{key: k, op: catalog.OpIn, values: newStrSet([]string{s.MatchLabels[k]})})
	}
	for _, r := range s.MatchExpressions {
		sel.reqs = append(sel.reqs, requirement{key: r.Key, op: r.Operator, values: newStrSet(r.Values)})
	}
	return sel
}

func (s *selector) match(labels map[string]string) bool {
	for i := range s.reqs {
		r := &s.reqs[i]
		v, ok := labels[r.key]
		switch r.op {
		case catalog.OpIn:
			if !ok || !r.values.has(v) {
				return false
			}
		case catalog.OpNotIn:
			if ok && r.values.has(v) {
				return false
			}
		case catalog.OpExists:
			if !ok {
				return false
			}
		case catalog.OpDoesNotExist:
			if ok {
				return false
			}
		default:
			return false // unreachable: Compile validated the operator
		}
	}
	return true
}

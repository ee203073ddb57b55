package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/strait-net/strait/catalog"
)

func pol(name string, prio int32, action catalog.Action, from catalog.Source, to catalog.Target) *catalog.AccessPolicy {
	return &catalog.AccessPolicy{
		Metadata: catalog.ObjectMeta{Name: name},
		Spec:     catalog.AccessPolicySpec{Priority: prio, Action: action, From: from, To: to},
	}
}

var (
	any_   = catalog.Source{}
	anyDst = catalog.Target{}
)

func sel(labels map[string]string, exprs ...catalog.LabelSelectorRequirement) *catalog.LabelSelector {
	return &catalog.LabelSelector{MatchLabels: labels, MatchExpressions: exprs}
}

func expr(key string, op catalog.SelectorOperator, values ...string) catalog.LabelSelectorRequirement {
	return catalog.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
}

// TestMatchers checks each matcher alone: one allow policy with the field
// set, a source/destination that should or should not match it.
func TestMatchers(t *testing.T) {
	src := Source{Cluster: "west", Namespace: "shop", Labels: map[string]string{"app": "web", "env": "prod"}}
	dst := Destination{Export: "echo", Namespace: "shop", Labels: map[string]string{"tier": "backend"}}
	many := make([]string, 20) // more than mapThreshold: the map path
	for i := range many {
		many[i] = fmt.Sprintf("c%d", i)
	}
	tests := []struct {
		name string
		from catalog.Source
		to   catalog.Target
		want bool
	}{
		{"empty matches all", any_, anyDst, true},
		{"cluster in list", catalog.Source{Clusters: []string{"east", "west"}}, anyDst, true},
		{"cluster not in list", catalog.Source{Clusters: []string{"east"}}, anyDst, false},
		{"cluster in long list", catalog.Source{Clusters: append(many, "west")}, anyDst, true},
		{"cluster not in long list", catalog.Source{Clusters: many}, anyDst, false},
		{"source namespace", catalog.Source{Namespaces: []string{"shop"}}, anyDst, true},
		{"source namespace mismatch", catalog.Source{Namespaces: []string{"other"}}, anyDst, false},
		{"workload matchLabels", catalog.Source{WorkloadSelector: sel(map[string]string{"app": "web"})}, anyDst, true},
		{"workload matchLabels value differs", catalog.Source{WorkloadSelector: sel(map[string]string{"app": "db"})}, anyDst, false},
		{"workload matchLabels key missing", catalog.Source{WorkloadSelector: sel(map[string]string{"team": "a"})}, anyDst, false},
		{"workload matchLabels all must hold", catalog.Source{WorkloadSelector: sel(map[string]string{"app": "web", "env": "dev"})}, anyDst, false},
		{"In", catalog.Source{WorkloadSelector: sel(nil, expr("env", catalog.OpIn, "dev", "prod"))}, anyDst, true},
		{"In value differs", catalog.Source{WorkloadSelector: sel(nil, expr("env", catalog.OpIn, "dev"))}, anyDst, false},
		{"In key missing", catalog.Source{WorkloadSelector: sel(nil, expr("team", catalog.OpIn, "a"))}, anyDst, false},
		{"NotIn", catalog.Source{WorkloadSelector: sel(nil, expr("env", catalog.OpNotIn, "dev"))}, anyDst, true},
		{"NotIn value listed", catalog.Source{WorkloadSelector: sel(nil, expr("env", catalog.OpNotIn, "prod"))}, anyDst, false},
		{"NotIn key missing", catalog.Source{WorkloadSelector: sel(nil, expr("team", catalog.OpNotIn, "a"))}, anyDst, true},
		{"Exists", catalog.Source{WorkloadSelector: sel(nil, expr("app", catalog.OpExists))}, anyDst, true},
		{"Exists key missing", catalog.Source{WorkloadSelector: sel(nil, expr("team", catalog.OpExists))}, anyDst, false},
		{"DoesNotExist", catalog.Source{WorkloadSelector: sel(nil, expr("team", catalog.OpDoesNotExist))}, anyDst, true},
		{"DoesNotExist key present", catalog.Source{WorkloadSelector: sel(nil, expr("app", catalog.OpDoesNotExist))}, anyDst, false},
		{"labels and expressions ANDed", catalog.Source{WorkloadSelector: sel(map[string]string{"app": "web"}, expr("env", catalog.OpIn, "dev"))}, anyDst, false},
		{"empty selector matches all", catalog.Source{WorkloadSelector: sel(nil)}, anyDst, true},
		{"export name", any_, catalog.Target{Exports: []string{"echo"}}, true},
		{"export name mismatch", any_, catalog.Target{Exports: []string{"db"}}, false},
		{"destination namespace", any_, catalog.Target{Namespaces: []string{"shop"}}, true},
		{"destination namespace mismatch", any_, catalog.Target{Namespaces: []string{"default"}}, false},
		{"export selector", any_, catalog.Target{ExportSelector: sel(map[string]string{"tier": "backend"})}, true},
		{"export selector mismatch", any_, catalog.Target{ExportSelector: sel(nil, expr("tier", catalog.OpNotIn, "backend"))}, false},
		{"from and to ANDed", catalog.Source{Clusters: []string{"west"}}, catalog.Target{Exports: []string{"db"}}, false},
		{"source fields ANDed", catalog.Source{Clusters: []string{"west"}, Namespaces: []string{"other"}}, anyDst, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := Compile([]*catalog.AccessPolicy{pol("p", 1, catalog.Allow, tt.from, tt.to)})
			if err != nil {
				t.Fatal(err)
			}
			d := ev.Decide(src, dst)
			if d.Allow != tt.want {
				t.Fatalf("Decide = %+v; want allow=%v", d, tt.want)
			}
			if tt.want && d.Policy != "p" {
				t.Errorf("Policy = %q, want p", d.Policy)
			}
			if !tt.want && (d.Policy != "" || d.Reason != DefaultDenyReason) {
				t.Errorf("no match must be the default deny: %+v", d)
			}
		})
	}
}

func TestPrecedence(t *testing.T) {
	west := catalog.Source{Clusters: []string{"west"}}
	echo := catalog.Target{Exports: []string{"echo"}}
	src := Source{Cluster: "west", Namespace: "a"}
	dst := Destination{Export: "echo", Namespace: "a"}
	tests := []struct {
		name       string
		policies   []*catalog.AccessPolicy
		wantAllow  bool
		wantPolicy string
	}{
		{"no policies: default deny", nil, false, ""},
		{"lower number wins: allow over deny", []*catalog.AccessPolicy{
			pol("deny-all", 100, catalog.Deny, any_, anyDst), pol("allow-west", 10, catalog.Allow, west, anyDst)}, true, "allow-west"},
		{"lower number wins: deny over allow", []*catalog.AccessPolicy{
			pol("allow-west", 100, catalog.Allow, west, anyDst), pol("deny-echo", 10, catalog.Deny, any_, echo)}, false, "deny-echo"},
		{"equal priority: deny beats allow", []*catalog.AccessPolicy{
			pol("a-allow", 5, catalog.Allow, west, echo), pol("z-deny", 5, catalog.Deny, west, anyDst)}, false, "z-deny"},
		{"equal priority, same action: by name", []*catalog.AccessPolicy{
			pol("b", 5, catalog.Allow, any_, anyDst), pol("a", 5, catalog.Allow, west, anyDst)}, true, "a"},
		{"non-matching higher precedence skipped", []*catalog.AccessPolicy{
			pol("deny-east", 0, catalog.Deny, catalog.Source{Clusters: []string{"east"}}, anyDst), pol("allow", 1000, catalog.Allow, any_, anyDst)}, true, "allow"},
		{"only non-matching: default deny", []*catalog.AccessPolicy{
			pol("allow-east", 1, catalog.Allow, catalog.Source{Clusters: []string{"east"}}, anyDst)}, false, ""},
		{"priority 0 is highest", []*catalog.AccessPolicy{
			pol("allow", 1, catalog.Allow, any_, anyDst), pol("deny", 0, catalog.Deny, any_, anyDst)}, false, "deny"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Input order must not matter.
			for _, ps := range [][]*catalog.AccessPolicy{tt.policies, reversed(tt.policies)} {
				ev, err := Compile(ps)
				if err != nil {
					t.Fatal(err)
				}
				d := ev.Decide(src, dst)
				if d.Allow != tt.wantAllow || d.Policy != tt.wantPolicy {
					t.Fatalf("Decide = %+v; want allow=%v policy=%q", d, tt.wantAllow, tt.wantPolicy)
				}
				if d.Policy != "" && !strings.Contains(d.Reason, d.Policy) {
					t.Errorf("Reason %q does not name the policy", d.Reason)
				}
			}
		})
	}
}

func reversed[T any](s []T) []T {
	out := make([]T, len(s))
	for i, x := range s {
		out[len(s)-1-i] = x
	}
	return out
}

func TestZeroEvaluatorDenies(t *testing.T) {
	var nilEv *Evaluator
	for _, ev := range []*Evaluator{nilEv, {}} {
		if d := ev.Decide(Source{Cluster: "w"}, Destination{Export: "e"}); d.Allow || d.Reason != DefaultDenyReason {
			t.Errorf("Decide = %+v", d)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	for name, ps := range map[string][]*catalog.AccessPolicy{
		"invalid action":  {pol("p", 1, "maybe", any_, anyDst)},
		"duplicate name":  {pol("p", 1, catalog.Allow, any_, anyDst), pol("p", 2, catalog.Deny, any_, anyDst)},
		"bad priority":    {pol("p", 1001, catalog.Allow, any_, anyDst)},
		"bad operator":    {pol("p", 1, catalog.Allow, catalog.Source{WorkloadSelector: sel(nil, expr("a", "Near"))}, anyDst)},
		"In without vals": {pol("p", 1, catalog.Allow, catalog.Source{WorkloadSelector: sel(nil, expr("a", catalog.OpIn))}, anyDst)},
	} {
		if _, err := Compile(ps); err == nil {
			t.Errorf("%s: Compile succeeded", name)
		}
	}
}

// hundred returns 100 policies of mixed shapes, none of which matches the
// benchmark's connection before the last, the worst case for first-match.
func hundred() []*catalog.AccessPolicy {
	var ps []*catalog.AccessPolicy
	for i := 0; i < 99; i++ {
		from := catalog.Source{
			Clusters:         []string{fmt.Sprintf("c%d", i), fmt.Sprintf("d%d", i)},
			Namespaces:       []string{"shop", "payments"},
			WorkloadSelector: sel(map[string]string{"app": "web"}, expr("env", catalog.OpIn, "prod", "staging")),
		}
		to := catalog.Target{Exports: []string{"echo", fmt.Sprintf("svc%d", i)},
			ExportSelector: sel(nil, expr("tier", catalog.OpNotIn, "internal"))}
		action := catalog.Allow
		if i%3 == 0 {
			action = catalog.Deny
		}
		ps = append(ps, pol(fmt.Sprintf("p%02d", i), int32(i), action, from, to))
	}
	ps = append(ps, pol("last", 999, catalog.Allow, catalog.Source{Clusters: []string{"west"}}, anyDst))
	return ps
}

func TestDecideDoesNotAllocate(t *testing.T) {
	ev, err := Compile(hundred())
	if err != nil {
		t.Fatal(err)
	}
	src := Source{Cluster: "west", Namespace: "shop", Labels: map[string]string{"app": "web", "env": "prod"}}
	dst := Destination{Export: "echo", Namespace: "shop", Labels: map[string]string{"tier": "backend"}}
	if d := ev.Decide(src, dst); !d.Allow || d.Policy != "last" {
		t.Fatalf("Decide = %+v", d)
	}
	if n := testing.AllocsPerRun(100, func() { ev.Decide(src, dst) }); n != 0 {
		t.Errorf("Decide allocates %.0f times", n)
	}
}

// BenchmarkDecide100 evaluates a connection that only the last of 100
// policies matches; the others name other clusters, which the cluster
// index skips.
func BenchmarkDecide100(b *testing.B) {
	ev, err := Compile(hundred())
	if err != nil {
		b.Fatal(err)
	}
	src := Source{Cluster: "west", Namespace: "shop", Labels: map[string]string{"app": "web", "env": "prod"}}
	dst := Destination{Export: "echo", Namespace: "shop", Labels: map[string]string{"tier": "backend"}}
	b.ReportAllocs()
	for b.Loop() {
		ev.Decide(src, dst)
	}
}

// BenchmarkDecide100Labels is the case where clusters match everywhere, so
// every policy runs its label selectors before failing on the last check.
func BenchmarkDecide100Labels(b *testing.B) {
	ps := hundred()
	for _, p := range ps[:99] {
		p.Spec.From.Clusters = nil
		p.Spec.To.ExportSelector = sel(nil, expr("tier", catalog.OpIn, "frontend"))
	}
	ev, err := Compile(ps)
	if err != nil {
		b.Fatal(err)
	}
	src := Source{Cluster: "west", Namespace: "shop", Labels: map[string]string{"app": "web", "env": "prod"}}
	dst := Destination{Export: "echo", Namespace: "shop", Labels: map[string]string{"tier": "backend"}}
	b.ReportAllocs()
	for b.Loop() {
		ev.Decide(src, dst)
	}
}

// TestAgainstReference compares Decide with a direct reading of the
// semantics (of all matching policies, the one with the lowest priority,
// deny before allow, then lowest name) on random policies and connections
// over a small universe, so that the cluster index and the ordering are
// checked together.
func TestAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(vals ...string) []string {
		var out []string
		for _, v := range vals {
			if rng.IntN(3) == 0 {
				out = append(out, v)
			}
		}
		return out
	}
	labelSel := func() *catalog.LabelSelector {
		switch rng.IntN(4) {
		case 0:
			return sel(map[string]string{"app": []string{"web", "db"}[rng.IntN(2)]})
		case 1:
			return sel(nil, expr("env", []catalog.SelectorOperator{catalog.OpIn, catalog.OpNotIn}[rng.IntN(2)], "prod"))
		case 2:
			return sel(nil, expr("env", []catalog.SelectorOperator{catalog.OpExists, catalog.OpDoesNotExist}[rng.IntN(2)]))
		}
		return nil
	}
	labels := func() map[string]string {
		m := map[string]string{}
		if rng.IntN(2) == 0 {
			m["app"] = []string{"web", "db"}[rng.IntN(2)]
		}
		if rng.IntN(2) == 0 {
			m["env"] = []string{"prod", "dev"}[rng.IntN(2)]
		}
		return m
	}
	clusters := []string{"a", "b", "c", "d"}
	for round := 0; round < 200; round++ {
		var ps []*catalog.AccessPolicy
		for i := 0; i < 1+rng.IntN(12); i++ {
			action := catalog.Allow
			if rng.IntN(2) == 0 {
				action = catalog.Deny
			}
			ps = append(ps, pol(fmt.Sprintf("p%d", i), int32(rng.IntN(4)), action,
				catalog.Source{Clusters: pick(clusters...), Namespaces: pick("x", "y"), WorkloadSelector: labelSel()},
				catalog.Target{Exports: pick("e", "f"), Namespaces: pick("x", "y"), ExportSelector: labelSel()}))
		}
		ev, err := Compile(ps)
		if err != nil {
			t.Fatal(err)
		}
		for q := 0; q < 50; q++ {
			src := Source{Cluster: clusters[rng.IntN(4)] + []string{"", "z"}[rng.IntN(2)], Namespace: []string{"x", "y"}[rng.IntN(2)], Labels: labels()}
			dst := Destination{Export: []string{"e", "f"}[rng.IntN(2)], Namespace: []string{"x", "y"}[rng.IntN(2)], Labels: labels()}
			want := reference(ps, src, dst)
			if got := ev.Decide(src, dst); got.Allow != want.Allow || got.Policy != want.Policy {
				t.Fatalf("round %d: Decide(%+v, %+v) = %+v, reference %+v", round, src, dst, got, want)
			}
		}
	}
}

func reference(ps []*catalog.AccessPolicy, src Source, dst Destination) Decision {
	in := func(list []string, v string) bool { return len(list) == 0 || slices.Contains(list, v) }
	selMatch := func(s *catalog.LabelSelector, l map[string]string) bool {
		if s == nil {
			return true
		}
		for k, v := range s.MatchLabels {
			if l[k] != v || !hasKey(l, k) {
				return false
			}
		}
		for _, r := range s.MatchExpressions {
			v, ok := l[r.Key]
			switch r.Operator {
			case catalog.OpIn:
				if !ok || !slices.Contains(r.Values, v) {
					return false
				}
			case catalog.OpNotIn:
				if ok && slices.Contains(r.Values, v) {
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
			}
		}
		return true
	}
	var best *catalog.AccessPolicy
	for _, p := range ps {
		f, to := p.Spec.From, p.Spec.To
		if !in(f.Clusters, src.Cluster) || !in(f.Namespaces, src.Namespace) || !selMatch(f.WorkloadSelector, src.Labels) ||
			!in(to.Exports, dst.Export) || !in(to.Namespaces, dst.Namespace) || !selMatch(to.ExportSelector, dst.Labels) {
			continue
		}
		if best == nil || p.Spec.Priority < best.Spec.Priority ||
			p.Spec.Priority == best.Spec.Priority && (p.Spec.Action == catalog.Deny && best.Spec.Action == catalog.Allow ||
				p.Spec.Action == best.Spec.Action && p.Metadata.Name < best.Metadata.Name) {
			best = p
		}
	}
	if best == nil {
		return Decision{}
	}
	return Decision{Allow: best.Spec.Action == catalog.Allow, Policy: best.Metadata.Name}
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

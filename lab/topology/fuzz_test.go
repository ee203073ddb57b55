package topology

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// FuzzPlan feeds arbitrary files through Parse, Validate and Plan: nothing
// may panic, Validate and Plan must agree, and every accepted topology must
// yield a deterministic plan that passes Check.
func FuzzPlan(f *testing.F) {
	if data, err := os.ReadFile("../../examples/quickstart.yaml"); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		twoClusters,
		twoClusters + "  - between: [a/gw, b/gw]\n",
		"name: one\nclusters: [{name: c, nodes: [{name: n}]}]\n",
		"name: w\naddressing: 10.0.0.0/8\nclusters: [{name: c, nodes: [{name: a}, {name: b}]}]\n",
		`name: mg
clusters:
  - name: a
    nodes: [{name: g1, gateway: true}, {name: g2, gateway: true}, {name: client}]
    lan: {forward: {delay: 2ms}, reverse: {delay: 3ms, jitter: 1ms, distribution: normal}}
  - {name: b, nodes: [{name: gw}, {name: server}]}
  - {name: c, nodes: [{name: gw}]}
wan:
  - between: [a/g1, b]
  - {between: [a/g2, b/gw], emulation: {rate: 1gbit, loss: 1%}}
  - between: [c, b]
  - between: [c, a/g2]
`,
		// Edges: nothing, cut short, address ranges too small and out of
		// range, numbers past their types, negative ones, invalid UTF-8.
		"",
		"name: one\nclusters: [{name: c, nodes: [{name: n",
		"name: w\naddressing: 10.0.0.0/31\nclusters: [{name: c, nodes: [{name: a}, {name: b}]}]\n",
		"name: w\naddressing: 0.0.0.0/0\nclusters: [{name: c, nodes: [{name: a}]}]\n",
		"name: w\naddressing: 10.0.0.0/99\nclusters: [{name: c, nodes: [{name: a}]}]\n",
		"name: w\nclusters:\n  - {name: a, nodes: [{name: gw}], lan: {forward: {delay: 9223372036854775808ns, rate: 1e400gbit, limit: 18446744073709551616}}}\n",
		"name: w\nclusters:\n  - {name: a, nodes: [{name: gw}], lan: {forward: {delay: -5ms, jitter: -1ms, loss: -1%, limit: -1}}}\n",
		// MTUs: at the bounds, past them, past int.
		"name: w\nmtu: 576\nclusters: [{name: a, nodes: [{name: gw}], mtu: 65000}, {name: b, nodes: [{name: gw}]}]\nwan: [{between: [a, b], mtu: 9000}]\n",
		"name: w\nmtu: 575\nclusters: [{name: a, nodes: [{name: gw}], mtu: 65001}]\n",
		"name: w\nmtu: 9223372036854775808\nclusters: [{name: a, nodes: [{name: gw}], mtu: -9000}]\n",
		"name: \xff\xfe\nclusters: [{name: \xc3, nodes: [{name: n}]}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		topo, err := Parse(data)
		if err != nil {
			return
		}
		verr := topo.Validate()
		p, perr := topo.Plan()
		if (verr == nil) != (perr == nil) {
			t.Fatalf("Validate = %v but Plan = %v", verr, perr)
		}
		if perr != nil {
			if strings.TrimSpace(perr.Error()) == "" {
				t.Fatal("empty error")
			}
			return
		}
		if err := p.Check(); err != nil {
			t.Fatalf("accepted topology gives a broken plan: %v\n%s", err, data)
		}
		again, _ := topo.Plan()
		if !reflect.DeepEqual(p, again) {
			t.Fatal("Plan is not deterministic")
		}
	})
}

package run

import (
	"testing"
	"time"
)

// TestUnitCost checks the estimate the ETA and the unit order use: a
// scenario's cells count where they run (streams only in their
// scenarios), closed-loop requests pay the round trip, new connections
// twice, and every tool pays its fixed cost.
func TestUnitCost(t *testing.T) {
	const base = `name: e
topology:
  name: x
  clusters:
    - {name: a, nodes: [{name: gw}, {name: server}]}
    - {name: b, nodes: [{name: gw}, {name: client}]}
  wan: [{between: [a, b]}]
scenarios: [lcl, cloud10]
server: a/server
client: b/client
tools: [direct, strait]
`
	parse := func(rest string) *Experiment {
		t.Helper()
		e, err := Parse([]byte(base+rest), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	const tools = 2
	fixed := unitOverhead + tools*toolOverhead
	for _, tc := range []struct {
		name         string
		rest         string
		lcl, cloud10 time.Duration
	}{
		{"streams only at lcl", "throughput: {streams: [1, 8], duration: 10s, scenarios: [lcl]}\n",
			fixed + tools*2*10*time.Second, fixed},
		{"a rate cell: warm-up, window and a round trip of drain", "rate: {rps: 100, duration: 10s, warmup: 2s}\n",
			fixed + tools*12*time.Second, fixed + tools*(12*time.Second+10*time.Millisecond)},
		{"kept connections: a round trip per request", "workloads: [{name: echo}]\nload: {requests: 100}\n",
			fixed + tools*100*time.Millisecond, fixed + tools*100*11*time.Millisecond},
		{"new connections: two", "workloads: [{name: echo}]\nload: {requests: 100, keepalive: false}\n",
			fixed + tools*100*time.Millisecond, fixed + tools*100*21*time.Millisecond},
		{"a duration is the least a closed-loop cell takes", "workloads: [{name: echo}]\nload: {requests: 10, duration: 5s}\n",
			fixed + tools*5*time.Second, fixed + tools*5*time.Second},
	} {
		e := parse(tc.rest)
		if lcl, cloud10 := e.unitCost(e.scenarios[0]), e.unitCost(e.scenarios[1]); lcl != tc.lcl || cloud10 != tc.cloud10 {
			t.Errorf("%s: lcl %v, cloud10 %v; want %v and %v", tc.name, lcl, cloud10, tc.lcl, tc.cloud10)
		}
	}
}

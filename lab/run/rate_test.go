package run

import (
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/lab/scenario"
	"github.com/strait-net/strait/load"
)

// TestRateConnections checks the connection rule: the experiment's count
// is the least, raised to twice what the path's round trip needs for the
// rate, capped at what the load generator takes.
func TestRateConnections(t *testing.T) {
	for _, tc := range []struct {
		name  string
		least int
		rps   float64
		rtt   time.Duration
		want  int
	}{
		{"lcl keeps seed 002's 100", 100, 10000, 0, 100},
		{"cloud10: 2 × 10 000/s × 10 ms", 100, 10000, 10 * time.Millisecond, 200},
		{"cloud30", 100, 10000, 30 * time.Millisecond, 600},
		{"edg20's 60 ms", 100, 10000, 60 * time.Millisecond, 1200},
		{"a low rate needs no more", 100, 1000, 10 * time.Millisecond, 100},
		{"a fraction rounds up", 1, 10000, 10300 * time.Microsecond, 206},
		{"a tiny need rounds up to one more than the least", 1, 1, 600 * time.Millisecond, 2},
		{"capped at the generator's maximum", 100, 1e6, time.Second, load.MaxConnections},
	} {
		if got := rateConnections(tc.least, tc.rps, tc.rtt); got != tc.want {
			t.Errorf("%s: rateConnections(%d, %v, %v) = %d, want %d", tc.name, tc.least, tc.rps, tc.rtt, got, tc.want)
		}
	}
}

// TestPathRoundTrip checks the round trip the rule uses against the
// scenarios' own path composition, on the built-in two-cluster topology,
// composed or not, and on a topology whose links declare their delays,
// one direction apart from the other and over two gateways.
func TestPathRoundTrip(t *testing.T) {
	e, err := LoadExperiment("seed002")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lcl", "cloud10", "cloud30", "edg10", "edge20"} {
		sc, err := scenario.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, composed := range []bool{false, true} {
			if composed {
				if sc, err = sc.ComposePath(); err != nil {
					t.Fatal(err)
				}
			}
			p, err := e.topo.Plan()
			if err != nil {
				t.Fatal(err)
			}
			sc.Apply(p)
			got, err := pathRoundTrip(p, e.Client, e.Server)
			if want := 2 * sc.Path().Delay; err != nil || got != want {
				t.Errorf("%s (composed %v): round trip %v, %v; want %v (twice its path's delay)", name, composed, got, err, want)
			}
		}
	}

	const declared = `name: d
topology:
  name: d
  clusters:
    - name: a
      nodes: [{name: g1, gateway: true}, {name: g2, gateway: true}, {name: client}]
      lan: {forward: {delay: 2ms}, reverse: {delay: 3ms}}
    - {name: b, nodes: [{name: gw}, {name: server}]}
  wan:
    - {between: [a/g1, b], emulation: {delay: 5ms}}
    - {between: [a/g2, b], emulation: {delay: 7ms}}
scenarios: [as-declared]
server: b/server
client: a/client
rate: {rps: 10000}
`
	d, err := Parse([]byte(declared), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Out: 2 ms on the client's link, the slower gateway's 7 ms; back:
	// 7 ms, 3 ms.
	if got := d.roundTrips["as-declared"]; got != 19*time.Millisecond {
		t.Errorf("declared links: round trip %v, want 19ms (the slower of two gateways)", got)
	}
	if got := d.Rate.connections("as-declared", 10000); got != 380 {
		t.Errorf("declared links: %d connections, want 380", got)
	}
}

// TestSeed002Rate checks seed002's plan: seed 002's 100 connections at
// lcl, twice what cloud10's 10 ms round trip needs there, streams only at
// lcl, a note saying why cloud10 opens more, and a run estimated within
// the half hour the README promises.
func TestSeed002Rate(t *testing.T) {
	e, err := LoadExperiment("seed002")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"lcl": 100, "cloud10": 200}
	if len(e.Scenarios) != len(want) {
		t.Fatalf("scenarios %v, want lcl and cloud10", e.Scenarios)
	}
	var total time.Duration
	for _, sc := range e.scenarios {
		cells := e.Rate.cells(sc.Name, "strait")
		if len(cells) != 1 || cells[0].Connections != want[sc.Name] || cells[0].Rate != 10000 {
			t.Errorf("%s: rate cells %+v, want one at 10 000/s over %d connections", sc.Name, cells, want[sc.Name])
		}
		if n, wantN := len(e.Throughput.cells(sc.Name, "strait")), map[string]int{"lcl": 3}[sc.Name]; n != wantN {
			t.Errorf("%s: %d stream cells, want %d", sc.Name, n, wantN)
		}
		total += time.Duration(e.Repetitions) * e.unitCost(sc)
	}
	notes := e.Rate.notes(e.Scenarios)
	if len(notes) != 1 || !strings.Contains(notes[0], "cloud10's round trip is 10ms: 10000 requests/s run over 200 connections, not 100") {
		t.Errorf("notes %q, want one for cloud10", notes)
	}
	lcl, cloud10 := e.unitCost(e.scenarios[0]), e.unitCost(e.scenarios[1])
	if cloud10 >= lcl {
		t.Errorf("unit cost: cloud10 %v, lcl %v; cloud10 measures no streams, so it should cost less", cloud10, lcl)
	}
	if total > 30*time.Minute {
		t.Errorf("seed002 estimated at %v, over the README's 30 minutes", total)
	}
	// A rate no connection count reaches is said so.
	e.Rate.RPS = Rates{1e6}
	e.roundTrips["cloud10"] = time.Second
	if notes := e.Rate.notes([]string{"cloud10"}); len(notes) != 1 || !strings.Contains(notes[0], "expect the cells to fall short of the rate") {
		t.Errorf("notes %q, want a warning that the cells will fall short", notes)
	}
}

package run

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/lab/scenario"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  string
	}{
		{"60", 60, ""}, {"60B", 60, ""}, {"1KB", 1000, ""}, {"1kb", 1000, ""}, {"100KB", 100000, ""},
		{"1MB", 1000000, ""}, {"1KiB", 1024, ""}, {"1.5KB", 1500, ""}, {" 2 KB ", 2000, ""},
		{"1.5B", 0, "whole number"}, {"-1", 0, "not a size"}, {"1XB", 0, "unknown unit"},
		{"2GiB", 0, "up to 1GiB"}, {"", 0, "not a size"},
	} {
		got, err := ParseSize(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSize(%q) = %d, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseExperimentErrors(t *testing.T) {
	const topo = `
topology:
  name: x
  clusters:
    - {name: a, nodes: [{name: gw}, {name: server}]}
    - {name: b, nodes: [{name: gw}, {name: client}]}
  wan: [{between: [a, b]}]
`
	for _, tc := range []struct{ body, err string }{
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\n", ""},
		{"name: E\n" + topo, "name \"E\""},
		{"name: e\n", "topology: missing"},
		{"name: e\n" + topo + "scenarios: [nope]\n", "scenarios[0]"},
		{"name: e\n" + topo + "scenarios: [lcl]\ntools: [magic]\n", "tools[0]: unknown tool \"magic\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/nope\nclient: b/client\n", "server: \"a/nope\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: ftp}]\n", "workloads[0].name \"ftp\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: static, payloads: [1KB]}]\n", "takes no request body"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\nload: {think: soon}\n", "load.think"},
		{"name: e\nbogus: 1\n", "field bogus not found"},
		{"", "parse experiment: empty: want a YAML mapping"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\n---\nname: f\n", "parse experiment: more than one YAML document"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nrate: {rps: [0]}\n", "rate.rps[0] 0"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nrate: {connections: -1}\n", "rate.connections -1"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nrate: {duration: 1ms}\n", "rate.duration \"1ms\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nrate: {warmup: later}\n", "rate.warmup \"later\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nrate: {workloads: [{name: hello, payloads: [1KB]}]}\n", "rate.workloads[0].payloads[0]"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nrate: {rps: 100, workloads: [{name: ftp}]}\n", "rate.workloads[0].name \"ftp\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nrate: {rps: fast}\n", "rps \"fast\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nthroughput: {rr: [0]}\n", "throughput.rr[0] 0"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nthroughput: {scenarios: [edg10]}\n", "throughput.scenarios[0] \"edg10\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\nload: {duration: forever}\n", "load.duration"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}, {name: echo, payloads: [1KB]}]\n", "workloads[1]: echo is also workloads[0]"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}, {name: echo, keepalive: false}]\n", ""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {}\n", ""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo, payloads: [1KB, 1MB], requests: {1MB: 30}}]\n", ""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo, payloads: [1KB], requests: {1MB: 30}}]\n", "workloads[0].requests: 1MB is not one of the payloads [1KB]"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo, payloads: [1KB], requests: {1KB: 0}}]\n", "workloads[0].requests: 1KB: 0 requests, want at least 1"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo, payloads: [1KB], requests: {lots: 3}}]\n", "workloads[0].requests: "},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nrate: {workloads: [{name: echo, payloads: [1KB], requests: {1KB: 3}}]}\n", "rate.workloads[0].requests: a rate cell sends for rate.duration"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {protocols: [sctp]}\n", "iperf3.protocols[0] \"sctp\": must be tcp or udp"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {protocols: [tcp, tcp]}\n", "given twice"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {interval: 10ms}\n", "iperf3.interval \"10ms\": want a duration between 100ms and 1m"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\nthroughput: {runs: -1}\n", "throughput.runs -1: must be between 1 and 100"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {trials: -1}\n", "iperf3.trials -1"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {udp-bitrate: fast}\n", "iperf3.udp-bitrate \"fast\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {udp-length: 10}\n", "iperf3.udp-length 10"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {udp-buffer: big}\n", "iperf3.udp-buffer \"big\""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {udp-bitrate: 900M, udp-length: 1400, udp-buffer: 4M}\n", ""},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {ping: {interval: 1ms}}\n", "iperf3.ping.interval \"1ms\""},
		{"name: e\n" + topo + "define-scenarios: [{name: big, mtu: 9000}]\nscenarios: [big]\nserver: a/server\nclient: b/client\niperf3: {}\n", ""},
		{"name: e\n" + topo + "define-scenarios: [{name: big, mtu: 90000}]\nscenarios: [big]\n", "define-scenarios[0]: mtu 90000: must be between 576 and 65000"},
		{"name: e\n" + topo + "define-scenarios: [{name: lcl}]\nscenarios: [lcl]\n", "define-scenarios[0]: name: \"lcl\" is a scenario of catalog seed000"},
		{"name: e\n" + topo + "define-scenarios: [{name: x1}, {name: x1}]\nscenarios: [x1]\n", "define-scenarios[1]: \"x1\" is defined twice"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {}\nreference: {source: s}\n", "reference: source and testbed are required"},
		{"name: e\n" + topo + "compose-path: true\nscenarios: [edg10]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\n", ""},
		{"name: e\n" + topo + "cpu-latency: 0\nscenarios: [edg10]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\n", ""},
		{"name: e\n" + topo + "cpu-latency: 20us\nscenarios: [edg10]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\n", ""},
		{"name: e\n" + topo + "cpu-latency: -5us\nscenarios: [edg10]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\n", "cpu-latency: -5µs: a wake-up latency must not be negative"},
		{"name: e\n" + topo + "cpu-latency: 1h\nscenarios: [edg10]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\n", "cpu-latency: 1h0m0s: at most 33m20s"},
		{"name: e\n" + topo + "cpu-latency: low\nscenarios: [edg10]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\n", `cpu-latency: "low" is not a duration`},
		{"name: e\n" + topo + "compose-path: true\nscenarios: [edg10]\nserver: a/server\nclient: b/gw\nworkloads: [{name: echo}]\n", "compose-path: b/gw is a gateway node"},
		{"name: e\n" + topo + "compose-path: true\nscenarios: [as-declared]\nserver: a/server\nclient: b/client\nworkloads: [{name: echo}]\n", "compose-path: scenario as-declared: nothing to compose"},
		{"name: e\n" + topo + "scenarios: [lcl]\nserver: a/server\nclient: b/client\niperf3: {}\nreference: {source: s, testbed: t, figures: [{measure: m, subject: x, value: .nan, unit: u}]}\n", "reference.figures[0].value"},
	} {
		_, err := Parse([]byte(tc.body), t.TempDir())
		if tc.err == "" {
			if err != nil {
				t.Errorf("Parse: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Parse(%q) error = %v, want it to contain %q", tc.body, err, tc.err)
		}
	}
}

func TestBuiltinsParse(t *testing.T) {
	if len(Builtins()) == 0 {
		t.Fatal("no built-in experiments")
	}
	for _, name := range Builtins() {
		if _, err := LoadExperiment(name); err != nil {
			t.Errorf("built-in %s: %v", name, err)
		}
	}
}

func FuzzParseExperiment(f *testing.F) {
	f.Add([]byte("name: q\ntopology: {name: x, clusters: [{name: a, nodes: [{name: n}]}]}\nscenarios: [lcl]\n"))
	f.Add([]byte("name: e\nworkloads: [{name: echo, payloads: [1KB, '60']}]\n"))
	f.Add([]byte("name: q\ntopology: {name: x, clusters: [{name: a, nodes: [{name: n}, {name: m}]}]}\nscenarios: [lcl]\nserver: a/n\nclient: a/m\nrate: {rps: [10, 2e3], connections: 3, duration: 1s, warmup: 0s, workloads: [{name: echo, payloads: [1KB]}]}\nthroughput: {rr: [64]}\n"))
	// Edges: nothing, cut short, numbers past their types, negative ones,
	// invalid UTF-8.
	f.Add([]byte{})
	f.Add([]byte("name: q\ntopology: {name: x, clusters: [{name: a, nod"))
	f.Add([]byte("name: q\nrepetitions: 99999999999999999999\nrate: {rps: [1e400, 18446744073709551616], connections: 9223372036854775808, duration: 9999999999h}\nworkloads: [{name: echo, payloads: [99999999999999999999KB]}]\n"))
	f.Add([]byte("name: q\nrepetitions: -1\nrate: {rps: [-10], connections: -3, duration: -1s, warmup: -1s}\nworkloads: [{name: echo, payloads: [-1KB]}]\nthroughput: {rr: [-64]}\n"))
	f.Add([]byte("name: \xff\xfe\nscenarios: [\xc3]\n"))
	f.Add([]byte("name: q\ntopology: {name: x, clusters: [{name: a, nodes: [{name: n}, {name: m}]}]}\ndefine-scenarios: [{name: j, wan: {rate: 1gbit}, mtu: 9000}]\nscenarios: [j]\nserver: a/n\nclient: a/m\niperf3: {protocols: [tcp, udp], trials: 50, interval: 0.5s, udp-bitrate: 10G, ping: {count: 5, interval: 2ms}}\nreference: {source: s, testbed: t, figures: [{measure: ping, subject: x, ours: direct, value: 1, unit: ms}]}\n"))
	f.Add([]byte("name: q\ntopology: {name: x, clusters: [{name: a, nodes: [{name: g}, {name: n}]}, {name: b, nodes: [{name: g}, {name: m}]}], wan: [{between: [a, b]}]}\ncompose-path: true\nscenarios: [edg10, cloud10]\nserver: a/n\nclient: b/m\nworkloads: [{name: recv}]\n"))
	f.Add([]byte("name: q\ndefine-scenarios: [{name: j, mtu: 99999999999999999999}]\niperf3: {trials: 99999999999999999999, interval: 9999999h, udp-bitrate: -1, ping: {count: -5}}\nreference: {figures: [{value: 1e400}]}\n"))
	// Declared delays over two gateways: the rate's round trip follows
	// every branch of the routes.
	f.Add([]byte("name: q\ntopology: {name: x, clusters: [{name: a, nodes: [{name: g1, gateway: true}, {name: g2, gateway: true}, {name: c}], lan: {forward: {delay: 2ms}}}, {name: b, nodes: [{name: g}, {name: s}]}], wan: [{between: [a/g1, b], emulation: {delay: 5ms}}, {between: [a/g2, b], emulation: {delay: 1h}}]}\nscenarios: [as-declared]\nserver: b/s\nclient: a/c\nrate: {rps: 1e6}\n"))
	f.Add([]byte("name: q\ncpu-latency: 99999999999999999999us\nworkloads: [{name: echo}]\n"))
	f.Add([]byte("name: q\nworkloads: [{name: echo, payloads: [1KB, 1MB], requests: {1MB: 30, 1024: -1, x: 99999999999999999999}}]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Must never panic, and never read a file for a fuzzed path.
		_, _ = Parse(b, "/nonexistent")
	})
}

// TestExamplesParse keeps the example experiments the README and the issue
// notes point to valid.
func TestExamplesParse(t *testing.T) {
	files, _ := filepath.Glob("../../examples/experiments/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example experiments found")
	}
	for _, f := range files {
		if _, err := LoadExperiment(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestParseRate checks the rate section's defaults and that its workloads
// join the ones the server runs.
func TestParseRate(t *testing.T) {
	const base = `name: e
topology:
  name: x
  clusters:
    - {name: a, nodes: [{name: gw}, {name: server}]}
    - {name: b, nodes: [{name: gw}, {name: client}]}
  wan: [{between: [a, b]}]
scenarios: [lcl]
server: a/server
client: b/client
`
	e, err := Parse([]byte(base+"workloads: [{name: hello}]\nrate: {}\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := e.Rate
	if len(r.RPS) != 1 || r.RPS[0] != 1000 || r.Connections != 10 || r.duration != 10*time.Second || r.warmup != 2*time.Second {
		t.Errorf("defaults: %+v", r)
	}
	if len(r.Workloads) != 1 || r.Workloads[0].Name != "echo" || r.Workloads[0].sizes[0] != 1000 {
		t.Errorf("default workload: %+v", r.Workloads)
	}
	if got := e.servedWorkloads(); !slices.Equal(got, []string{"hello", "echo"}) {
		t.Errorf("served workloads %v, want hello and echo", got)
	}
	if cells := r.cells("lcl", "direct"); len(cells) != 1 || cells[0].Rate != 1000 || cells[0].Payload != 1000 {
		t.Errorf("cells %+v", cells)
	}
	e, err = Parse([]byte(base+"rate: {rps: [100, 200], connections: 4, duration: 1s, warmup: 0s, workloads: [{name: echo, payloads: [60, 1KB], kpi: 50ms}]}\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.Rate.cells("lcl", "strait")); n != 4 {
		t.Errorf("%d cells, want 2 payloads × 2 rates", n)
	}
	if k := e.kpis(); k["echo"] != 50 {
		t.Errorf("kpis %v, want echo 50 ms", k)
	}
	// --workloads narrows the rate section too; --payloads replaces its sizes.
	if err := e.Override(Overrides{Payloads: []string{"10KB"}}); err != nil {
		t.Fatal(err)
	}
	if w := e.Rate.Workloads[0]; len(w.sizes) != 1 || w.sizes[0] != 10000 {
		t.Errorf("after --payloads 10KB: %+v", w)
	}
	if err := e.Override(Overrides{Workloads: []string{"static"}}); err == nil || !strings.Contains(err.Error(), `no workload "static"`) {
		t.Errorf("--workloads static: %v", err)
	}
}

// TestWorkloadConnections checks that one experiment measures a workload on
// kept connections and on new ones as two cells, and that throughput can
// be limited to some scenarios, also after --scenarios narrows them.
func TestWorkloadConnections(t *testing.T) {
	e, err := LoadExperiment("quickstart")
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{e: e}
	var labels []string
	for _, c := range r.cells() {
		if c.Scenario == "lcl" && c.Tool == "direct" {
			labels = append(labels, c.Workload)
		}
	}
	if !slices.Equal(labels, []string{"echo", "echo-newconn"}) {
		t.Errorf("lcl direct cells %v, want echo and echo-newconn", labels)
	}
	if ka := []bool{e.Workloads[0].keepAlive(e.Load), e.Workloads[1].keepAlive(e.Load)}; !ka[0] || ka[1] {
		t.Errorf("keep-alive per workload %v, want [true false]", ka)
	}
	if n := len(e.Throughput.cells("lcl", "strait")); n != 0 {
		t.Errorf("%d throughput cells at lcl, want none (throughput.scenarios: [cloud10])", n)
	}
	if n := len(e.Throughput.cells("cloud10", "strait")); n != 1 || e.Throughput.Runs < 2 {
		t.Errorf("%d throughput cells at cloud10 of %d runs, want 1 of several (a ratio's interval needs two)", n, e.Throughput.Runs)
	}
	if err := e.Override(Overrides{Scenarios: []string{"lcl"}}); err != nil {
		t.Fatal(err)
	}
	if e.Throughput != nil {
		t.Errorf("--scenarios lcl kept throughput %+v, which runs only at cloud10", e.Throughput)
	}
}

// TestComposePath checks that compose-path, from the file or the command
// line, gives every scenario its composed path (scenario.ComposePath), is
// recorded in the source a resumed run must match, and is refused where
// the client–server path is not LAN, WAN, LAN.
func TestComposePath(t *testing.T) {
	edg10, err := scenario.Lookup("edg10")
	if err != nil {
		t.Fatal(err)
	}
	e, err := LoadExperiment("seed000")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Override(Overrides{Scenarios: []string{"lcl", "edg10"}, ComposePath: true}); err != nil {
		t.Fatal(err)
	}
	if len(e.scenarios) != 2 {
		t.Fatalf("scenarios %v, want lcl and edg10", e.scenarios)
	}
	got := e.scenarios[1]
	if got.Name != "edg10" || !got.LAN.IsZero() || got.WAN != edg10.Path() || got.ComposedFrom == "" {
		t.Errorf("edg10 with compose-path: %+v; want lan none, wan %v", got, edg10.Path())
	}
	if lcl := e.scenarios[0]; !lcl.LAN.IsZero() || !lcl.WAN.IsZero() {
		t.Errorf("lcl with compose-path: %+v, want no impairment", lcl)
	}
	if !strings.Contains(string(e.source), "# overrides: scenarios=lcl,edg10 compose-path") {
		t.Errorf("the recorded source does not name compose-path:\n%s", e.source)
	}
	// Overridden again (as a second override would), nothing composes twice.
	if err := e.Override(Overrides{Repetitions: 2}); err != nil {
		t.Fatal(err)
	}
	if e.scenarios[1].WAN != edg10.Path() {
		t.Errorf("edg10 after a second override: wan %v, want %v", e.scenarios[1].WAN, edg10.Path())
	}

	const three = `name: e
topology:
  name: x
  clusters:
    - {name: a, nodes: [{name: gw}, {name: server}, {name: other}]}
    - {name: b, nodes: [{name: gw}, {name: client}]}
    - {name: c, nodes: [{name: gw}, {name: far}]}
  wan: [{between: [a, b]}, {between: [b, c]}]
compose-path: true
scenarios: [edg10]
workloads: [{name: echo}]
`
	for _, tc := range []struct{ server, client, err string }{
		{"a/server", "b/client", ""},
		{"c/far", "b/client", ""},
		{"a/server", "c/far", "compose-path: no WAN link joins clusters c and a"},
		{"a/server", "a/other", "compose-path: server a/server and client a/other are in one cluster"},
		{"a/gw", "b/client", "compose-path: a/gw is a gateway node"},
	} {
		_, err := Parse([]byte(three+"server: "+tc.server+"\nclient: "+tc.client+"\n"), t.TempDir())
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("server %s, client %s: got %v, want %q", tc.server, tc.client, err, tc.err)
		}
	}
}

// TestWorkloadRequests: a workload's requests map sets the count of its
// payloads' cells and the others keep load.requests; --payloads keeps the
// counts of the payloads still listed, and --requests sets every cell's.
func TestWorkloadRequests(t *testing.T) {
	e, err := LoadExperiment("../../examples/experiments/keepalive-matrix.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e.Load.Requests = 200
	e.Workloads[0].Requests = map[string]int{"100KB": 300, "1000000": 30}
	if err := e.Override(Overrides{Payloads: []string{"60", "100KB", "1MB"}}); err != nil {
		t.Fatal(err)
	}
	r := &runner{e: e}
	count := func(payload int) string {
		args := r.seqArgs(Cell{Payload: payload}, e.Workloads[0], "x", "-")
		return args[slices.Index(args, "--requests")+1]
	}
	for payload, want := range map[int]string{60: "200", 100000: "300", 1000000: "30"} {
		if got := count(payload); got != want {
			t.Errorf("payload %d: --requests %s, want %s", payload, got, want)
		}
	}
	if err := e.Override(Overrides{Payloads: []string{"60", "1MB"}}); err != nil {
		t.Fatalf("--payloads without 100KB: %v", err)
	}
	if got := count(1000000); got != "30" {
		t.Errorf("1MB after --payloads: --requests %s, want 30", got)
	}
	if err := e.Override(Overrides{Requests: 10}); err != nil {
		t.Fatal(err)
	}
	for _, payload := range []int{60, 1000000} {
		if got := count(payload); got != "10" {
			t.Errorf("payload %d after --requests 10: --requests %s", payload, got)
		}
	}
}

package run

import (
	"math"
	"strings"
	"testing"
)

func TestSoakValidate(t *testing.T) {
	const head = `name: e
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
	for _, tc := range []struct{ soak, err string }{
		{"soak: {}", ""},
		{"soak: {duration: 20s, interval: 2s}", ""},
		{"soak: {duration: 10ms}", `soak.duration "10ms"`},
		{"soak: {duration: 10s, interval: 5s}", "at least three samples"},
		{"soak: {interval: never}", `soak.interval "never"`},
		{"soak: {warmup: 0.95}", "soak.warmup 0.95"},
		{"soak: {tolerance: -1}", "soak.tolerance -1"},
		{"soak: {rate: -5}", "soak.rate -5"},
		{"soak: {connections: -1}", "soak.connections -1"},
		{"soak: {payload: 1XB}", "soak.payload"},
		{"soak: {bulk: lots}", "soak.bulk"},
		{"soak: {churn-think: -1s}", `soak.churn-think "-1s"`},
		{"soak: {size: 1}", "field size not found"},
	} {
		_, err := Parse([]byte(head+tc.soak+"\n"), ".")
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v, want %q", tc.soak, err, tc.err)
		}
	}
	e, err := Parse([]byte(head+"soak: {}\n"), ".")
	if err != nil {
		t.Fatal(err)
	}
	if s := e.Soak; s.duration.Minutes() != 10 || s.interval.Seconds() != 5 || s.Warmup != 0.2 || s.Tolerance != 0.1 || s.Rate != 1000 || s.payload != 1000 || s.bulk != 1000000 {
		t.Errorf("defaults: %+v", s)
	}
	if err := e.Override(Overrides{Duration: "60m"}); err != nil || e.Soak.duration.Minutes() != 60 || !strings.Contains(string(e.source), "duration=60m") {
		t.Errorf("--duration 60m: %v, duration %v", err, e.Soak.duration)
	}
	plain, err := Parse([]byte(head+"workloads: [{name: echo}]\n"), ".")
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Override(Overrides{Duration: "1m"}); err == nil || !strings.Contains(err.Error(), "no soak section") {
		t.Errorf("--duration without a soak: %v", err)
	}
}

func TestParseVmRSS(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		err  string
	}{
		{"Name:\tstrait\nVmPeak:\t 9 kB\nVmRSS:\t   65536 kB\nThreads: 9\n", 64, ""},
		{"Name:\tkthreadd\n", 0, "no VmRSS"},
		{"VmRSS:\t12 MB\n", 0, "want a number of kB"},
		{"VmRSS:\tlots kB\n", 0, "want a number of kB"},
		{"VmRSS:\t-4 kB\n", 0, "want a number of kB"},
	} {
		got, err := parseVmRSS(strings.NewReader(tc.in))
		if tc.err == "" && (err != nil || got != tc.want) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("parseVmRSS(%q) = %v, %v; want %v, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func FuzzParseVmRSS(f *testing.F) {
	f.Add("VmRSS:\t   65536 kB\n")
	f.Add("VmRSS: 18446744073709551615 kB")
	f.Add("VmRSS:")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseVmRSS(strings.NewReader(s))
		if err == nil && (v < 0 || math.IsNaN(v)) {
			t.Fatalf("%q: %v without error", s, v)
		}
	})
}

func TestMetricValue(t *testing.T) {
	const page = "# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 42\n# TYPE strait_streams_total counter\nstrait_streams_total 7\n"
	if v, err := metricValue(page, "go_goroutines"); err != nil || v != 42 {
		t.Errorf("go_goroutines = %v, %v; want 42", v, err)
	}
	for _, tc := range []struct{ page, err string }{
		{page + "garbage{\n", "parse metrics"},
		{"strait_streams_total 7\n", "no gauge go_goroutines"},
		{"# TYPE go_goroutines counter\ngo_goroutines 3\n", "no gauge go_goroutines"},
	} {
		if _, err := metricValue(tc.page, "go_goroutines"); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: error %v, want %q", tc.page, err, tc.err)
		}
	}
}

func FuzzMetricValue(f *testing.F) {
	f.Add("# TYPE go_goroutines gauge\ngo_goroutines 42\n")
	f.Add("# TYPE go_goroutines gauge\n")
	f.Add("go_goroutines{a=\"b\"} NaN\n")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = metricValue(s, "go_goroutines") // must not panic
	})
}

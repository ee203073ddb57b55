package tool

import (
	"strconv"
	"strings"
	"testing"
)

func TestEnvoyCounters(t *testing.T) {
	got := envoyCounters("cluster.echo.upstream_cx_total: 3\ncluster.echo.version_text: \"\"\nserver.state: 0\nnot a stat\ncluster.recv.upstream_cx_total: 0")
	want := map[string]uint64{"cluster.echo.upstream_cx_total": 3, "server.state": 0, "cluster.recv.upstream_cx_total": 0}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %d (present %v), want %d", k, g, ok, v)
		}
	}
}

// FuzzEnvoyCounters: whatever Envoy's admin interface returns, the parser
// neither panics nor invents a counter: every one it reports is a line of
// the input.
func FuzzEnvoyCounters(f *testing.F) {
	f.Add("cluster.echo.upstream_cx_total: 3\nserver.state: 0\n")
	f.Add("a: b: 1\n: 2\nx:  \t7\r\n")
	// Edges: nothing, a counter past uint64, a negative one, invalid
	// UTF-8, a line cut after its colon, one counter twice.
	f.Add("")
	f.Add("x: 18446744073709551616\ny: 18446744073709551615\n")
	f.Add("x: -1\n")
	f.Add("\xff\xfe: 3\nx: \xc3\n")
	f.Add("cluster.echo.upstream_cx_total: ")
	f.Add("x: 1\nx: 2\n")
	f.Fuzz(func(t *testing.T, stats string) {
		for name, v := range envoyCounters(stats) {
			found := false
			for _, line := range strings.Split(stats, "\n") {
				n, value, ok := strings.Cut(line, ": ")
				if ok && n == name {
					if p, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64); err == nil && p == v {
						found = true
						break
					}
				}
			}
			if !found {
				t.Fatalf("counter %s=%d is no line of %q", name, v, stats)
			}
		}
	})
}

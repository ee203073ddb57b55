package gateway_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// TestMetricsExposition parses both gateways' /metrics with the Prometheus
// library's own parser after echo traffic through them, and checks every
// metric name and label the gateways have always exposed, the process and
// Go runtime collectors, and that the histograms observed the traffic: the
// stream opens at the importing gateway, the first bytes of the target's
// answers at the exporting one, and keepalive round trips per peer.
func TestMetricsExposition(t *testing.T) {
	p := startPair(t)
	const conns = 5
	msg := bytes.Repeat([]byte("x"), 1000)
	for range conns {
		c, err := net.Dial("tcp", p.importAddr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, len(msg))); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	common := []string{
		"strait_streams_open", "strait_streams_total", "strait_stream_bytes_total", "strait_policy_denials_total",
		"strait_streams_refused_total", "strait_stream_open_failures_total", "strait_client_connections_total",
		"strait_target_dials_total", "strait_sessions_accepted_total", "strait_import_unknown_total", "strait_imports",
		"strait_stream_open_seconds", "strait_target_first_byte_seconds",
		"process_resident_memory_bytes", "process_open_fds", "process_cpu_seconds_total", "go_goroutines", "go_memstats_heap_inuse_bytes",
	}
	peer := []string{"strait_peer_rtt_seconds", "strait_peer_sessions_live", "strait_peer_gateway_up", "strait_peer_gateway_share",
		"strait_peer_gateway_streams_total", "strait_peer_gateway_downs_total", "strait_peer_rtt_sample_seconds"}

	// The exporting gateway: every stream's first byte from the target,
	// and its bytes once it ended (after the client's close reached it).
	var a map[string]*dto.MetricFamily
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		a = scrape(t, p.metrics["a"])
		if fb := a["strait_target_first_byte_seconds"]; fb != nil && fb.Metric[0].GetHistogram().GetSampleCount() >= conns &&
			value(a, "strait_streams_open", "point", "ingress") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exporting gateway: first-byte histogram %v, want %d samples", a["strait_target_first_byte_seconds"], conns)
		}
	}
	need(t, "a", a, common)
	if got := value(a, "strait_streams_total", "point", "ingress"); got != conns {
		t.Errorf("a: strait_streams_total{point=ingress} = %v, want %d", got, conns)
	}
	if got := value(a, "strait_stream_bytes_total", "point", "ingress", "direction", "out"); got != conns*float64(len(msg)) {
		t.Errorf("a: strait_stream_bytes_total{point=ingress,direction=out} = %v, want %d", got, conns*len(msg))
	}

	// The importing gateway: opens, and RTT samples to a.
	var b map[string]*dto.MetricFamily
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b = scrape(t, p.metrics["b"])
		if r := b["strait_peer_rtt_sample_seconds"]; r != nil && r.Metric[0].GetHistogram().GetSampleCount() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("importing gateway: no RTT sample of peer a")
		}
	}
	need(t, "b", b, append(common, peer...))
	if n := b["strait_stream_open_seconds"].Metric[0].GetHistogram().GetSampleCount(); n != conns {
		t.Errorf("b: strait_stream_open_seconds has %d samples, want %d", n, conns)
	}
	if got := b["strait_peer_rtt_sample_seconds"].Metric[0].GetLabel(); len(got) != 1 || got[0].GetName() != "peer" || got[0].GetValue() != "a" {
		t.Errorf("b: RTT histogram labels %v, want peer=a", got)
	}
	if v := value(b, "strait_client_connections_total"); v != conns {
		t.Errorf("b: strait_client_connections_total = %v, want %d", v, conns)
	}
	if v := value(b, "process_resident_memory_bytes"); v <= 0 {
		t.Errorf("b: process_resident_memory_bytes = %v", v)
	}
}

func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var parser expfmt.TextParser
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics of %s: %v", addr, err)
	}
	return fams
}

func need(t *testing.T, who string, fams map[string]*dto.MetricFamily, names []string) {
	t.Helper()
	for _, n := range names {
		if f := fams[n]; f == nil || len(f.Metric) == 0 {
			t.Errorf("%s: no metric %s", who, n)
		}
	}
}

// value is the first sample of the family with the labels (name, value
// pairs), counter, gauge or untyped; -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			ok = ok && have[labels[i]] == labels[i+1]
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Untyped != nil:
			return m.Untyped.GetValue()
		}
	}
	return -1
}

package run

import (
	"strings"
	"testing"

	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

func TestWriteVerdicts(t *testing.T) {
	cell := func(sc, tool, wl string, iqm float64, ratio []float64) CellResult {
		c := CellResult{Cell: Cell{Scenario: sc, Tool: tool, Workload: wl, Payload: 1000}, Summary: report.Summary{Count: 50, OK: 50, IQRMeanMS: iqm}}
		if ratio != nil {
			c.RatioIQRMean, c.RatioIQRMeanCI = &ratio[0], &report.Interval{Lo: ratio[1], Hi: ratio[2]}
		}
		return c
	}
	cells := []CellResult{
		cell("lcl", "direct", "echo", 0.1, nil),
		cell("lcl", "strait", "echo", 0.35, []float64{3.5, 3.3, 3.7}),
		cell("edg10", "direct", "echo", 30, nil),
		cell("edg10", "strait", "echo", 30.3, []float64{1.01, 0.99, 1.03}),
		cell("edg10", "direct", "echo-newconn", 66, nil),
		cell("edg10", "strait", "echo-newconn", 44, []float64{0.667, 0.65, 0.68}),
		cell("cloud10", "direct", "echo", 12, nil),
		cell("cloud10", "strait", "echo", 17.4, []float64{1.45, 1.42, 1.48}),
	}
	tput := []report.ThroughputSummary{
		{ThroughputCell: report.ThroughputCell{Scenario: "cloud10", Tool: "direct", Streams: 1}, MeanGbps: 0.05},
		{ThroughputCell: report.ThroughputCell{Scenario: "cloud10", Tool: "strait", Streams: 1}, MeanGbps: 0.95},
		{ThroughputCell: report.ThroughputCell{Scenario: "lcl", Tool: "direct", Streams: 1}, MeanGbps: 20},
		{ThroughputCell: report.ThroughputCell{Scenario: "lcl", Tool: "strait", Streams: 1}, MeanGbps: 5},
		// Three runs each: the ratio's interval says what holds.
		{ThroughputCell: report.ThroughputCell{Scenario: "edg10", Tool: "direct", Streams: 1}, Gbps: []float64{0.04, 0.05, 0.06}, MeanGbps: 0.05},
		{ThroughputCell: report.ThroughputCell{Scenario: "edg10", Tool: "strait", Streams: 1}, Gbps: []float64{0.9, 0.95, 1.0}, MeanGbps: 0.95},
		{ThroughputCell: report.ThroughputCell{Scenario: "edg10", Tool: "direct", Streams: 8}, Gbps: []float64{0.9, 1.1}, MeanGbps: 1},
		{ThroughputCell: report.ThroughputCell{Scenario: "edg10", Tool: "strait", Streams: 8}, Gbps: []float64{0.9, 1.0}, MeanGbps: 0.95},
	}
	rate := func(sc, tool string, conns int, p99us int64, answered ...float64) report.RateSummary {
		s := report.RateSummary{RateCell: report.RateCell{Scenario: sc, Tool: tool, Workload: "echo", Payload: 1000, Rate: 10000, Connections: conns},
			Count: 100000, Latency: load.Percentiles{P99: p99us}}
		for i, a := range answered {
			s.Repetitions = append(s.Repetitions, report.RateRepetition{Repetition: i + 1, AnsweredRate: a})
			s.AnsweredRate += a / float64(len(answered))
			s.BelowRate = s.BelowRate || report.BelowRate(a, s.Rate)
		}
		return s
	}
	rates := []report.RateSummary{
		rate("lcl", "direct", 100, 900, 9990, 9995),
		rate("lcl", "strait", 100, 1250, 9990, 9980),
		rate("lcl", "envoy", 100, 800, 9990, 9980),
		rate("cloud10", "direct", 200, 11000, 9900),
		rate("cloud10", "envoy", 200, 900000, 7337),
		rate("cloud30", "direct", 600, 900000, 9950, 8000),
		rate("cloud30", "strait", 600, 31000, 9950),
	}
	var b strings.Builder
	if err := WriteVerdicts(&b, cells, rates, tput); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"lcl echo 1KB: strait costs 0.250 ms per request (0.350 ms against 0.100 ms direct)",
		"edg10 echo 1KB: strait is at par with direct (30.3 ms against 30 ms direct; 1.010× [0.99, 1.03])",
		"edg10 echo-newconn 1KB: strait is 1.50× faster than direct (44 ms against 66 ms direct; 0.667× [0.65, 0.68])",
		"cloud10 echo 1KB: strait costs 45 % more than direct, +5.4 ms (17.4 ms against 12 ms direct; 1.450× [1.42, 1.48])",
		"cloud10 bulk ×1: strait moves 19.0× as much as direct (0.95 Gbit/s against 0.05 Gbit/s direct)",
		"lcl bulk ×1: strait moves 0.25× what direct moves (5 Gbit/s against 20 Gbit/s direct)",
		"edg10 bulk ×1: strait moves at least 11× as much as direct (0.95 Gbit/s against 0.05 Gbit/s direct; 19× [11.4, 31.8], means of 3 and 3 runs)",
		"edg10 bulk ×8: strait moves as much as direct within the interval (0.95 Gbit/s against 1 Gbit/s direct; 0.95× [0.226, 3.99], means of 2 and 2 runs)",
		"lcl echo 1KB, 10000/s over 100 connections: strait costs 0.350 ms at the p99 (1.25 ms against 0.900 ms direct)",
		"lcl echo 1KB, 10000/s over 100 connections: envoy saves 0.100 ms at the p99 (0.800 ms against 0.900 ms direct)",
		"cloud10 echo 1KB, 10000/s over 200 connections: envoy did not reach the rate (7337/s answered, 73 %, in its slowest repetition): its latencies measure a saturated queue, not the path",
		// A direct short of the rate in one repetition is named, and no
		// tool is compared with it.
		"cloud30 echo 1KB, 10000/s over 600 connections: direct did not reach the rate (8000/s answered, 80 %, in its slowest repetition): its latencies measure a saturated queue, not the path",
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("verdicts lack %q:\n%s", want, b.String())
		}
	}
	if n := strings.Count(b.String(), "\n  "); n != 12 {
		t.Errorf("%d verdict lines, want one per cell of a tool other than direct (8 closed loop and stream, 3 rate) and one per direct short of its rate (1):\n%s", n, b.String())
	}
	// Rate cells alone still get their header.
	b.Reset()
	if err := WriteVerdicts(&b, nil, rates[3:5], nil); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "\nIn plain words:\n  cloud10 echo 1KB") || strings.Count(b.String(), "\n  ") != 1 {
		t.Errorf("rate verdicts alone:\n%s", b.String())
	}
}

// TestRoundBounds: a bound is rounded away from the interval's inside, to
// a precision that keeps a ratio below 1 below 1.
func TestRoundBounds(t *testing.T) {
	for _, c := range []struct {
		v        float64
		down, up string
	}{
		{31.8, "31", "32"},
		{11.4, "11", "12"},
		{1.04, "1.04", "1.1"},
		{0.987, "0.98", "0.99"},
		{0.252, "0.25", "0.26"},
		{0.0428, "0.04", "0.05"},
		{0.996, "0.99", "0.996"},
		{1.004, "1.004", "1.1"},
	} {
		if got := roundDown(c.v); got != c.down {
			t.Errorf("roundDown(%v) = %s, want %s", c.v, got, c.down)
		}
		if got := roundUp(c.v); got != c.up {
			t.Errorf("roundUp(%v) = %s, want %s", c.v, got, c.up)
		}
	}
}

package run

import (
	"strings"
	"testing"

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
	}
	var b strings.Builder
	if err := WriteVerdicts(&b, cells, tput); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"lcl echo 1KB: strait costs 0.250 ms per request (0.350 ms against 0.100 ms direct)",
		"edg10 echo 1KB: strait is at par with direct (30.3 ms against 30 ms direct; 1.010× [0.99, 1.03])",
		"edg10 echo-newconn 1KB: strait is 1.50× faster than direct (44 ms against 66 ms direct; 0.667× [0.65, 0.68])",
		"cloud10 echo 1KB: strait costs 45 % more than direct, +5.4 ms (17.4 ms against 12 ms direct; 1.450× [1.42, 1.48])",
		"cloud10 bulk ×1: strait moves 19.0× as much as direct (0.95 Gbit/s against 0.05 Gbit/s direct)",
		"lcl bulk ×1: strait moves 0.25× what direct moves (5 Gbit/s against 20 Gbit/s direct)",
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("verdicts lack %q:\n%s", want, b.String())
		}
	}
	if n := strings.Count(b.String(), "\n  "); n != 6 {
		t.Errorf("%d verdict lines, want one per strait cell (6):\n%s", n, b.String())
	}
}

package run

import (
	"strings"
	"testing"

	"github.com/strait-net/strait/report"
)

func TestWriteTableFlagsKPIs(t *testing.T) {
	ratio, lo, hi := 1.25, 1.1, 1.4
	cells := []CellResult{
		{Cell: Cell{Scenario: "edg20", Tool: "direct", Workload: "static"}, Summary: report.Summary{Count: 40, OK: 40, MedianMS: 90, IQRMeanMS: 80}},
		{Cell: Cell{Scenario: "edg20", Tool: "strait", Workload: "static"}, Summary: report.Summary{Count: 40, OK: 40, MedianMS: 110, IQRMeanMS: 100},
			RatioIQRMean: &ratio, RatioIQRMeanCI: &report.Interval{Lo: lo, Hi: hi}},
		{Cell: Cell{Scenario: "edg20", Tool: "strait", Workload: "hello"}, Summary: report.Summary{Count: 40, Errors: 40}},
	}
	var b strings.Builder
	if err := WriteTable(&b, cells, map[string]float64{"static": 100}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("table:\n%s", b.String())
	}
	// direct: no ratio, median 90 ms meets 100 ms; strait: 110 ms misses
	// it; hello has no KPI and no successful request.
	for i, want := range []string{"- - ok", "1.250× [1.100, 1.400] MISSED 100 ms", "- - - - - - - -"} {
		if got := strings.Join(strings.Fields(lines[i+1]), " "); !strings.HasSuffix(got, want) {
			t.Errorf("row %d %q: want it to end with %q", i+1, got, want)
		}
	}
}

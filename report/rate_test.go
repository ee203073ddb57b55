package report

import (
	"math"
	"strings"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/strait-net/strait/load"
)

// rateResult is what `strait load rate --json` would write for latencies
// lo..hi µs, one each, read back: only the encoded histogram and the
// counts, as a result read from a file has.
func rateResult(t *testing.T, lo, hi int64, answered float64) *load.RateResult {
	t.Helper()
	h := hdrhistogram.New(1, 60_000_000, 3)
	for v := lo; v <= hi; v++ {
		if err := h.RecordValue(v); err != nil {
			t.Fatal(err)
		}
	}
	enc, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		t.Fatal(err)
	}
	return &load.RateResult{Count: hi - lo + 1, AnsweredRate: answered, AchievedRate: answered, LatencyHistogram: string(enc),
		Latency: load.Percentiles{P50: (lo + hi) / 2}}
}

func TestSummarizeRate(t *testing.T) {
	cell := RateCell{Scenario: "lcl", Tool: "strait", Workload: "echo", Payload: 1000, Rate: 1000}
	s, err := SummarizeRate(cell, []int{1, 3}, []*load.RateResult{rateResult(t, 1000, 1999, 990), rateResult(t, 3000, 3999, 1000)})
	if err != nil {
		t.Fatal(err)
	}
	if s.Count != 2000 || s.AnsweredRate != 995 || s.AchievedRate != 995 || len(s.Repetitions) != 2 || s.Repetitions[1].Repetition != 3 {
		t.Errorf("summary %+v", s)
	}
	// The merged distribution's median lies between the repetitions (the
	// top of the first), not at the mean of their medians (2500).
	if s.Latency.P50 < 1995 || s.Latency.P50 > 2001 || s.Latency.P100 < 3999 || s.Latency.P100 > 4001 {
		t.Errorf("merged p50 %d, max %d; want about 2000 and 4000", s.Latency.P50, s.Latency.P100)
	}
	if _, err := SummarizeRate(cell, []int{1}, []*load.RateResult{{Count: 5}}); err == nil || !strings.Contains(err.Error(), "latency_histogram") {
		t.Errorf("a repetition without histogram: %v", err)
	}
	if _, err := SummarizeRate(cell, nil, nil); err == nil {
		t.Error("no repetitions: no error")
	}
	if s.BelowRate {
		t.Errorf("990/s and 1000/s of 1000/s flagged below the rate")
	}
	// One repetition short by more than RateShortfall flags the cell,
	// though the mean (962.5/s) is within it.
	if s, err := SummarizeRate(cell, []int{1, 2}, []*load.RateResult{rateResult(t, 1000, 1999, 1000), rateResult(t, 1000, 1999, 925)}); err != nil || !s.BelowRate {
		t.Errorf("a repetition at 925/s of 1000/s: below %v, %v; want flagged", s.BelowRate, err)
	}
	// A repetition over other connections than the cell's is not the
	// cell's (a run resumed with another rule).
	cell.Connections = 200
	r := rateResult(t, 1000, 1999, 1000)
	r.Connections = 100
	if _, err := SummarizeRate(cell, []int{1}, []*load.RateResult{r}); err == nil || !strings.Contains(err.Error(), "repetition 1 ran over 100 connections, the cell over 200") {
		t.Errorf("a repetition over 100 connections in a cell of 200: %v", err)
	}
}

// TestSummarizeRateMismatch: numbers and results that do not pair up are
// an error naming the counts, not a panic or a mislabelled summary.
func TestSummarizeRateMismatch(t *testing.T) {
	cell := RateCell{Scenario: "lcl", Tool: "strait", Workload: "echo", Payload: 1000, Rate: 1000}
	two := []*load.RateResult{rateResult(t, 1000, 1999, 990), rateResult(t, 3000, 3999, 1000)}
	for _, tc := range []struct {
		name    string
		numbers []int
		reps    []*load.RateResult
		want    string
	}{
		{"fewer numbers", []int{1}, two, "1 repetition numbers for 2 results"},
		{"no numbers", nil, two, "0 repetition numbers for 2 results"},
		{"more numbers", []int{1, 2, 3}, two, "3 repetition numbers for 2 results"},
		{"nil result", []int{1, 2}, []*load.RateResult{two[0], nil}, "repetition 2: no result"},
		{"number twice", []int{2, 2}, two, "repetition 2 given twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := SummarizeRate(cell, tc.numbers, tc.reps); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestWriteRateTable(t *testing.T) {
	var cells []RateSummary
	for _, tc := range []struct {
		tool   string
		lo, hi int64
	}{{"direct", 1000, 1999}, {"strait", 2000, 3999}} {
		r := rateResult(t, tc.lo, tc.hi, 500)
		r.Connections = 200
		s, err := SummarizeRate(RateCell{Scenario: "edg10", Tool: tc.tool, Workload: "echo", Payload: 1000, Rate: 500, Connections: 200},
			[]int{1}, []*load.RateResult{r})
		if err != nil {
			t.Fatal(err)
		}
		cells = append(cells, s)
	}
	var b strings.Builder
	if err := WriteRateTable(&b, cells); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "p99.99 ms") || !strings.Contains(lines[1], "p99 vs direct") || !strings.Contains(lines[1], "rate/s  conns  tool") {
		t.Fatalf("table:\n%s", b.String())
	}
	if f := strings.Fields(lines[3]); f[4] != "200" || f[7] != "500.0" {
		t.Errorf("strait row %q: connections %s, answered %s; want 200 and 500.0", lines[3], f[4], f[7])
	}
	// strait's p50 (about 3000 µs) is 2× direct's (about 1500 µs).
	if f := ratioFields(lines[3]); f[0] != "2.000×" && f[0] != "1.999×" && f[0] != "2.001×" {
		t.Errorf("strait row %q: p50 ratio %s, want 2×", lines[3], f[0])
	}
	if f := ratioFields(lines[2]); f[1] != "-" {
		t.Errorf("direct row %q has a ratio", lines[2])
	}

	// A cell where every request failed has no latency to compare.
	failed := RateSummary{RateCell: RateCell{Scenario: "edg10", Tool: "other", Workload: "echo", Payload: 1000, Rate: 500},
		Repetitions: []RateRepetition{{Repetition: 1, Errors: 5000}}, Errors: 5000}
	b.Reset()
	if err := WriteRateTable(&b, append(cells, failed)); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(b.String()), "\n")
	if f := ratioFields(lines[4]); f[1] != "-" || f[0] != "-" {
		t.Errorf("row without successful requests %q has ratios to direct", lines[4])
	}

	// A cell short of its rate is starred and explained under the table.
	short := cells[1]
	short.Tool, short.AnsweredRate, short.BelowRate = "slow", 400, true
	b.Reset()
	if err := WriteRateTable(&b, append(cells, short)); err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 6 || strings.Fields(lines[4])[7] != "400.0*" || !strings.HasPrefix(lines[5], "* 1 of 3 cells answered less than their target rate by more than 5 %") {
		t.Errorf("table with a cell short of its rate:\n%s", b.String())
	}
}

// TestRateTableSaysWhatWasAnswered: a repetition whose generator failed
// or never sent part of its requests answered fewer than ended. The table
// shows what was answered, flags it below the rate, and shows the errors
// and the unsent ones; a result written before answered_rate is read the
// same way.
func TestRateTableSaysWhatWasAnswered(t *testing.T) {
	cell := RateCell{Scenario: "lcl", Tool: "strait", Workload: "echo", Payload: 1000, Rate: 5000}
	r := rateResult(t, 1, 46080, 0)
	// 10 s: 46 080 answered, 3 870 failed, 1 200 of them never sent, as
	// load.RunRate writes it and as a result from before answered_rate.
	r.Errors, r.Unsent, r.ElapsedSec, r.AchievedRate = 3870, 1200, 10, 4995
	old := *r
	r.AnsweredRate, old.AnsweredRate = 4608, 0
	for name, res := range map[string]*load.RateResult{"current": r, "without answered_rate": &old} {
		s, err := SummarizeRate(cell, []int{1}, []*load.RateResult{res})
		if err != nil {
			t.Fatal(err)
		}
		if s.AnsweredRate != 4608 || s.Repetitions[0].AnsweredRate != 4608 || !s.BelowRate || s.Errors != 3870 || s.Unsent != 1200 {
			t.Errorf("%s: answered %.2f/s (repetition %.2f), below %v, errors %d, unsent %d; want 4608, flagged, 3870, 1200",
				name, s.AnsweredRate, s.Repetitions[0].AnsweredRate, s.BelowRate, s.Errors, s.Unsent)
		}
		var b strings.Builder
		if err := WriteRateTable(&b, []RateSummary{s}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		h, f := strings.Fields(lines[1]), strings.Fields(lines[2])
		if h[7] != "answered/s" || f[7] != "4608.0*" || h[8] != "errors" || f[8] != "3870" || h[9] != "unsent" || f[9] != "1200" {
			t.Errorf("%s: table\n%s\nwant answered/s 4608.0*, errors 3870, unsent 1200", name, b.String())
		}
	}
}

// ratioFields returns a rate row's p50 and p99 ratio columns, which come
// before the three usage columns (here "not measured": no usage given).
func ratioFields(line string) []string {
	f := strings.Fields(strings.ReplaceAll(line, NotMeasuredText, "n/m"))
	return f[len(f)-5 : len(f)-3]
}

func TestRatioToDirect(t *testing.T) {
	type row struct {
		sc, tool string
		v        float64
	}
	rows := []row{{"a", "direct", 2}, {"a", "strait", 3}, {"b", "strait", 5}, {"c", "direct", 0}, {"c", "strait", 1}}
	ratio := RatioToDirect(rows, func(r row) string { return r.sc }, func(r row) string { return r.tool }, func(r row) float64 { return r.v })
	for _, tc := range []struct {
		r    row
		want string
	}{{rows[0], "-"}, {rows[1], "1.500×"}, {rows[2], "-"}, {rows[4], "-"}} {
		if got := FormatRatio(ratio(tc.r)); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.r, got, tc.want)
		}
	}
}

func TestWriteThroughputTable(t *testing.T) {
	bulk := func(tool string, gbps ...float64) ThroughputSummary {
		s := ThroughputSummary{ThroughputCell: ThroughputCell{Scenario: "lcl", Tool: tool, Streams: 4}}
		for _, g := range gbps {
			s.Add(&load.StreamResult{Gbps: g, Retransmits: 1, CC: "cubic"})
		}
		return s
	}
	rr := func(tool string, tps float64) ThroughputSummary {
		s := ThroughputSummary{ThroughputCell: ThroughputCell{Scenario: "lcl", Tool: tool, Streams: 1, RR: 64}}
		s.Add(&load.StreamResult{TPS: tps, Latency: &load.Percentiles{P50: 250}})
		return s
	}
	cells := []ThroughputSummary{bulk("direct", 8, 10), bulk("strait", 4, 5), rr("direct", 4000), rr("strait", 1000)}
	if c := cells[0]; c.MeanGbps != 9 || c.Reps() != 2 || c.Retransmits != 2 {
		t.Errorf("bulk summary %+v", c)
	}
	if lo, hi := cells[1].Range(); lo != 4 || hi != 5 {
		t.Errorf("range %v..%v, want 4..5", lo, hi)
	}
	var b strings.Builder
	if err := WriteThroughputTable(&b, cells); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// direct's 8 and 10 Gbit/s: 9 ± 12.706 (Student's t with one degree
	// of freedom); one rr repetition has no interval.
	if iv := cells[0].MeanGbpsCI; iv == nil || math.Abs(iv.Lo+3.706) > 1e-3 || math.Abs(iv.Hi-21.706) > 1e-3 {
		t.Errorf("bulk interval %+v, want [-3.706, 21.706]", iv)
	}
	if cells[2].MeanTPSCI != nil {
		t.Errorf("one repetition's interval: %+v, want none", cells[2].MeanTPSCI)
	}
	for _, want := range []string{"bulk TCP throughput:", "TCP request/response rate:", "0.500×", "0.250×", "0.250  ", "95% CI", "[-3.706, 21.706]"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

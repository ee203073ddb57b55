package html

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	xhtml "golang.org/x/net/html"

	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

// addRateAndThroughput gives run open-loop cells (strait's latencies
// twice direct's; edg20's tails above echo's KPI; each scenario's
// connections 100 × its position, and a later scenario's strait short of
// the rate) and stream cells (strait at half direct's Gbit/s and a
// quarter of its transactions/s).
func addRateAndThroughput(run *Run, scenarios []string) {
	for si, sc := range scenarios {
		for _, tool := range []string{"direct", "strait"} {
			f := int64(1 + si)
			if tool == "strait" {
				f *= 2
			}
			p := load.Percentiles{Mean: float64(600 * f), P50: 500 * f, P75: 700 * f, P90: 900 * f, P99: 2000 * f,
				P999: 5000 * f, P9999: 9000 * f, P100: 600_000 * f}
			achieved, below := 999.5, false
			if si > 0 && tool == "strait" {
				achieved, below = 733.7, true
			}
			run.Rate = append(run.Rate, report.RateSummary{
				RateCell:    report.RateCell{Scenario: sc, Tool: tool, Workload: "echo", Payload: 1000, Rate: 1000, Connections: 100 * (si + 1)},
				Repetitions: []report.RateRepetition{{Repetition: 1, AnsweredRate: achieved, Count: 10000, Latency: p}},
				Count:       10000, AnsweredRate: achieved, BelowRate: below, Latency: p,
			})
			g := 10.0
			if tool == "strait" {
				g = 5
			}
			bulk := report.ThroughputSummary{ThroughputCell: report.ThroughputCell{Scenario: sc, Tool: tool, Streams: 1}}
			bulk.Add(&load.StreamResult{Gbps: g, CC: "cubic"})
			rr := report.ThroughputSummary{ThroughputCell: report.ThroughputCell{Scenario: sc, Tool: tool, Streams: 1, RR: 1024}}
			rr.Add(&load.StreamResult{TPS: 400 * g * g / 10, Latency: &load.Percentiles{P50: 300}})
			run.Throughput = append(run.Throughput, bulk, rr)
		}
	}
}

// TestWriteRateAndThroughput renders a run of only open-loop and stream
// measurements: the percentile table per scenario × tool with ratios to
// direct and KPI flags, and the bulk and rr tables with theirs.
func TestWriteRateAndThroughput(t *testing.T) {
	run := Run{Dir: "synthetic", Scenarios: []string{"lcl", "edg20"}, Metadata: Metadata{Experiment: "peers"}}
	addRateAndThroughput(&run, run.Scenarios)
	// A second repetition of every bulk cell, 1.2× the first: means of
	// 11 and 5.5 Gbit/s at lcl, each with an interval.
	for i := range run.Throughput {
		if c := &run.Throughput[i]; c.RR == 0 {
			c.Add(&load.StreamResult{Gbps: c.Gbps[0] * 1.2, CC: "cubic"})
		}
	}
	d := parse(t, render(t, run))
	table := d.byID("rate-echo-1KB-1000")
	if table == nil {
		t.Fatal("no rate table rate-echo-1KB-1000")
	}
	rows := elements(table, "tr")
	if len(rows) != 5 { // header + 2 scenarios × 2 tools
		t.Fatalf("rate table has %d rows, want 5", len(rows))
	}
	head := text(rows[0])
	for _, l := range []string{"p50", "p75", "p90", "p99", "p99.9", "p99.99", "p100", "mean"} {
		if !strings.Contains(head, l) {
			t.Errorf("rate table header %q lacks %s", head, l)
		}
	}
	// lcl strait: p50 1.000 ms, 2× direct's 0.500 ms.
	if got := text(rows[2]); !strings.Contains(got, "strait") || !strings.Contains(got, "1.000 2.000×") {
		t.Errorf("lcl strait row %q: want p50 1.000 ms at 2.000× direct", got)
	}
	if got := text(rows[1]); strings.Contains(got, "×") {
		t.Errorf("direct row %q carries a ratio", got)
	}
	// Each row names its connections; edg20's strait fell short of the
	// rate, and only it is flagged.
	if got := text(rows[3]); !strings.Contains(got, "edg20direct2001999.5") {
		t.Errorf("edg20 direct row %q: want its 200 connections before reps and answered rate", got)
	}
	below := d.find(func(n *xhtml.Node) bool { return hasClass(n, "below") })
	if len(below) != 1 || !strings.Contains(text(below[0]), "733.7 below the rate") {
		t.Errorf("%d cells flagged below the rate, want edg20 strait's answered rate", len(below))
	}
	// echo's default KPI is 1000 ms: only maxima of 1200 ms and more pass it.
	over := d.find(func(n *xhtml.Node) bool { return hasClass(n, "over") })
	if len(over) != 3 {
		t.Errorf("%d cells flagged over the KPI, want 3 (lcl strait's, edg20 direct's and strait's maxima)", len(over))
	}
	bulk, rr := d.byID("throughput-bulk"), d.byID("throughput-rr")
	if bulk == nil || rr == nil {
		t.Fatal("no throughput tables")
	}
	if got := text(elements(bulk, "tr")[2]); !strings.Contains(got, "0.500×") {
		t.Errorf("bulk strait row %q: want 0.500× direct", got)
	}
	// lcl direct's 10 and 12 Gbit/s: 11 ± 12.706·√2/√2.
	if got := text(elements(bulk, "tr")[1]); !strings.Contains(got, "[-1.706, 23.706]") {
		t.Errorf("bulk direct row %q: want the mean's interval [-1.706, 23.706]", got)
	}
	if got := text(elements(rr, "tr")[1]); strings.Contains(got, "[") {
		t.Errorf("rr direct row %q: one repetition, want no interval", got)
	}
	if got := text(elements(rr, "tr")[2]); !strings.Contains(got, "0.250×") || !strings.Contains(got, "1024B") {
		t.Errorf("rr strait row %q: want 1024 B messages at 0.250× direct", got)
	}
	if d.byID("cells-table") != nil {
		t.Error("a run without requests has a table of request cells")
	}
}

// TestLoadRunRateOnly reads a run directory of a rate-only experiment:
// rate.json and throughput.json, an empty requests.csv.
func TestLoadRunRateOnly(t *testing.T) {
	want := Run{Scenarios: []string{"lcl"}, Metadata: Metadata{Experiment: "peers", Scenarios: []ScenarioInfo{{Name: "lcl"}}}}
	addRateAndThroughput(&want, want.Scenarios)
	dir := t.TempDir()
	for name, v := range map[string]any{"metadata.json": want.Metadata, RateFile: want.Rate, ThroughputFile: want.Throughput} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "requests.csv"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Rate) != 2 || got.Rate[1].Latency != want.Rate[1].Latency || len(got.Throughput) != 4 || got.Throughput[3].MeanTPS != want.Throughput[3].MeanTPS {
		t.Errorf("loaded rate %+v, throughput %+v", got.Rate, got.Throughput)
	}
	if got.KPIs != nil {
		t.Errorf("KPIs %v from metadata without kpis, want nil (the defaults)", got.KPIs)
	}
	// Recorded KPIs replace the defaults, even when there are none.
	b, _ := json.Marshal(map[string]any{"experiment": "peers", "kpis": map[string]float64{}})
	os.WriteFile(filepath.Join(dir, "metadata.json"), b, 0o644)
	if got, err = LoadRun(dir); err != nil || got.KPIs == nil || len(got.KPIs) != 0 {
		t.Errorf("kpis {}: %v, %v; want an empty map", got.KPIs, err)
	}
	os.WriteFile(filepath.Join(dir, RateFile), []byte("[{"), 0o644)
	if _, err := LoadRun(dir); err == nil || !strings.Contains(err.Error(), RateFile) {
		t.Errorf("corrupt rate.json: %v", err)
	}
}

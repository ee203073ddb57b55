package html

import (
	"strings"
	"testing"

	xhtml "golang.org/x/net/html"

	"github.com/strait-net/strait/report"
)

// addIperfAndUsage adds seed 004 cells (strait carrying TCP only), usage
// to every rate and stream cell (direct's kernel, strait's two gateways),
// run totals and a reference of another testbed.
func addIperfAndUsage(run *Run, scenarios []string) {
	gw := func(cpu float64) []report.Usage {
		return []report.Usage{{Seconds: 10, Bytes: 5e9, Processes: []report.ProcessUsage{
			{Name: "gateway", Node: "a/gw", CPUSeconds: cpu, PeakRSSBytes: 60e6},
			{Name: "gateway", Node: "b/gw", CPUSeconds: cpu, PeakRSSBytes: 50e6}}}}
	}
	kernel := report.SummarizeUsage([]report.Usage{{Kernel: true, Seconds: 10, Bytes: 5e9}})
	for i := range run.Throughput {
		if run.Throughput[i].Tool == "direct" {
			run.Throughput[i].Usage = kernel
		} else {
			run.Throughput[i].Usage = report.SummarizeUsage(gw(1.5))
		}
	}
	for i := range run.Rate {
		u := gw(0.8)
		u[0].Bytes, u[0].Requests = 0, 12000
		run.Rate[i].Usage = report.SummarizeUsage(u)
		if run.Rate[i].Tool == "direct" {
			run.Rate[i].Usage = report.SummarizeUsage([]report.Usage{{Kernel: true, Seconds: 12, Requests: 12000}})
		}
	}
	for si, sc := range scenarios {
		for _, tool := range []string{"direct", "strait"} {
			for _, proto := range []string{"tcp", "udp", "icmp"} {
				c := report.IperfSummary{IperfCell: report.IperfCell{Scenario: sc, Tool: tool, Protocol: proto}}
				if tool == "strait" && proto != "tcp" {
					run.Iperf = append(run.Iperf, c) // not carried
					continue
				}
				c.Carried = true
				for k := range 50 {
					c.Trials = append(c.Trials, float64(1+si)+float64(k%5)/10)
				}
				c.Finish()
				c.Usage = kernel
				if tool == "strait" {
					c.Usage = report.SummarizeUsage(gw(2))
				}
				run.Iperf = append(run.Iperf, c)
			}
		}
	}
	run.Metadata.ToolUsage = map[string]*report.UsageSummary{"direct": kernel, "strait": report.SummarizeUsage(gw(9))}
	run.Metadata.Reference = &Reference{Source: "seed 002", Testbed: "bare metal", Figures: []ReferenceFigure{
		{Measure: "stream ×1", Subject: "Skupper single stream", Ours: "strait", Value: 4.2, Unit: "Gbit/s"},
		{Measure: "rate p99", Subject: "Istio", Ours: "envoy", Value: 26.8, Unit: "ms"},
	}}
}

// TestUsageAndIperf: kernel tools read "kernel", never 0; a protocol a
// tool does not carry reads "not carried"; the reference table gives our
// value where we measured the measure and says so where not.
func TestUsageAndIperf(t *testing.T) {
	run := Run{Dir: "synthetic", Scenarios: []string{"1g-1500", "unshaped-9000"}, Metadata: Metadata{Experiment: "seed004"}}
	addRateAndThroughput(&run, run.Scenarios)
	addIperfAndUsage(&run, run.Scenarios)
	d := parse(t, render(t, run))
	table := d.byID("iperf-table")
	if table == nil {
		t.Fatal("no iperf-table")
	}
	rows := elements(table, "tr")
	if len(rows) != 1+2*2*3 {
		t.Fatalf("iperf table: %d rows, want 13", len(rows))
	}
	var notCarried, kernel int
	for _, r := range rows[1:] {
		txt := nodeText(r)
		if strings.Contains(txt, "not carried") {
			notCarried++
			if !strings.Contains(txt, "strait") {
				t.Errorf("row %q: only strait leaves a protocol uncarried", txt)
			}
		}
		if strings.Contains(txt, "kernel") {
			kernel++
		}
	}
	if notCarried != 4 || kernel != 6 {
		t.Errorf("iperf table: %d not-carried rows (want 4), %d kernel rows (want 6)", notCarried, kernel)
	}
	bulk := d.byID("throughput-bulk")
	if bulk == nil || !strings.Contains(nodeText(bulk), "kernel") || !strings.Contains(nodeText(bulk), "0.600") {
		t.Errorf("bulk table lacks direct's kernel usage or strait's 3 CPU s per 5 GB (0.600 s/GB): %q", nodeText(bulk))
	}
	ref := d.byID("reference-table")
	if ref == nil {
		t.Fatal("no reference-table")
	}
	rrows := elements(ref, "tr")
	if len(rrows) != 3 || !strings.Contains(nodeText(rrows[1]), "4.2") || !strings.Contains(nodeText(rrows[1]), "5.000") ||
		!strings.Contains(nodeText(rrows[2]), "not measured") {
		t.Errorf("reference table: %q", nodeText(ref))
	}
	for _, id := range []string{"usage-table", "tool-usage", "iperf-tcp", "iperf-udp", "iperf-icmp", "throughput-plot", "rate-plot"} {
		if d.byID(id) == nil {
			t.Errorf("no element %s", id)
		}
	}
	if u := d.byID("usage-table"); u != nil && strings.Contains(nodeText(u), "NaN") {
		t.Errorf("usage table has NaN: %q", nodeText(u))
	}
}

func nodeText(n *xhtml.Node) string {
	var b strings.Builder
	var walk func(*xhtml.Node)
	walk = func(n *xhtml.Node) {
		if n.Type == xhtml.TextNode {
			b.WriteString(n.Data)
			b.WriteByte(' ')
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

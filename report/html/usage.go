package html

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/strait-net/strait/report"
)

// usageRow is one line of the CPU and memory table.
type usageRow struct {
	Kind, Scenario, Tool, What string
	Usage                      *report.UsageSummary
	PerUnit                    string // CPU per GB or per 10 000 requests, with its unit
}

// usageRows lists every cell's usage: closed-loop cells (from summary.json),
// rate, stream and iperf3 cells.
func (m *model) usageRows() []usageRow {
	var rows []usageRow
	for _, c := range m.Run.CellUsage {
		rows = append(rows, usageRow{"requests", c.Scenario, c.Tool, fmt.Sprintf("%s %s", c.Workload, report.FormatSize(c.Payload)), c.Usage, per10k(c.Usage)})
	}
	for _, c := range m.Run.Rate {
		rows = append(rows, usageRow{"rate", c.Scenario, c.Tool, fmt.Sprintf("%s %s at %s/s", c.Workload, report.FormatSize(c.Payload), fmtNum(c.Rate)), c.Usage, per10k(c.Usage)})
	}
	for _, c := range m.Run.Throughput {
		what, per := fmt.Sprintf("bulk ×%d", c.Streams), perGB(c.Usage)
		if c.RR > 0 {
			what, per = fmt.Sprintf("rr %s ×%d", report.FormatSize(c.RR), c.Streams), per10k(c.Usage)
		}
		rows = append(rows, usageRow{"stream", c.Scenario, c.Tool, what, c.Usage, per})
	}
	for _, c := range m.Run.Iperf {
		if !c.Carried {
			continue
		}
		per := perGB(c.Usage)
		if c.Protocol == "icmp" {
			per = "–"
		}
		rows = append(rows, usageRow{"iperf3", c.Scenario, c.Tool, c.Protocol, c.Usage, per})
	}
	slices.SortStableFunc(rows, func(a, b usageRow) int { return m.scenarioIndex(a.Scenario) - m.scenarioIndex(b.Scenario) })
	return rows
}

func perGB(u *report.UsageSummary) string {
	if u == nil || u.Kernel || u.CPUPerGB == nil {
		return u.PerGBText()
	}
	return u.PerGBText() + " s/GB"
}

func per10k(u *report.UsageSummary) string {
	if u == nil || u.Kernel || u.CPUPer10kRequests == nil {
		return u.Per10kText()
	}
	return u.Per10kText() + " s/10k req"
}

// toolUsageRow is a tool's total over the run.
type toolUsageRow struct {
	Tool  string
	Usage *report.UsageSummary
}

func (m *model) toolUsageRows() []toolUsageRow {
	var rows []toolUsageRow
	for _, t := range slices.Sorted(mapsKeys(m.Run.Metadata.ToolUsage)) {
		rows = append(rows, toolUsageRow{t, m.Run.Metadata.ToolUsage[t]})
	}
	return rows
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// iperfView is seed 004's table, one row per scenario, tool and protocol.
type iperfView struct {
	Rows    []iperfRow
	Figures []figure
}

type iperfRow struct {
	report.IperfSummary
	Ratio    float64
	HasRatio bool
}

func (m *model) iperfView() *iperfView {
	cells := slices.Clone(m.Run.Iperf)
	if len(cells) == 0 {
		return nil
	}
	slices.SortStableFunc(cells, func(a, b report.IperfSummary) int {
		if d := m.scenarioIndex(a.Scenario) - m.scenarioIndex(b.Scenario); d != 0 {
			return d
		}
		return b2i(a.Tool != report.Baseline) - b2i(b.Tool != report.Baseline)
	})
	ratio := report.IperfRatio(cells)
	v := &iperfView{}
	for _, c := range cells {
		r, ok := ratio(c)
		v.Rows = append(v.Rows, iperfRow{c, r, ok})
	}
	return v
}

// referenceRow is a published figure beside ours.
type referenceRow struct {
	Measure, Subject, Ours, Unit string
	Theirs                       float64
	Our                          float64
	HasOur                       bool
}

// ReferenceFigure is the part of a reference figure the report reads.
type ReferenceFigure struct {
	Measure string  `json:"measure"`
	Subject string  `json:"subject"`
	Ours    string  `json:"ours"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
}

// Reference is another testbed's published figures (metadata.json).
type Reference struct {
	Source  string            `json:"source"`
	Testbed string            `json:"testbed"`
	Figures []ReferenceFigure `json:"figures"`
}

// referenceRows pairs each published figure with this run's value of the
// same measure through the tool standing for theirs, in the run's first
// scenario: "stream ×N" (bulk Gbit/s with N streams), "rate p50" and
// "rate p99" (ms at the first target rate), "iperf3 tcp", "iperf3 udp"
// (Gbit/s), "ping" (ms).
func (m *model) referenceRows() []referenceRow {
	ref := m.Run.Metadata.Reference
	if ref == nil {
		return nil
	}
	var rows []referenceRow
	for _, f := range ref.Figures {
		r := referenceRow{Measure: f.Measure, Subject: f.Subject, Ours: f.Ours, Unit: f.Unit, Theirs: f.Value}
		r.Our, r.HasOur = m.ourValue(f.Measure, f.Ours)
		rows = append(rows, r)
	}
	return rows
}

func (m *model) ourValue(measure, tool string) (float64, bool) {
	if tool == "" || len(m.scenarios) == 0 {
		return 0, false
	}
	sc := m.scenarios[0]
	var streams int
	if _, err := fmt.Sscanf(measure, "stream ×%d", &streams); err == nil {
		for _, c := range m.Run.Throughput {
			if c.Scenario == sc && c.Tool == tool && c.RR == 0 && c.Streams == streams && c.Reps() > 0 {
				return c.MeanGbps, true
			}
		}
		return 0, false
	}
	switch measure {
	case "rate p50", "rate p99":
		for _, c := range m.Run.Rate {
			if c.Scenario == sc && c.Tool == tool && c.Count > 0 {
				if measure == "rate p50" {
					return float64(c.Latency.P50) / 1000, true
				}
				return float64(c.Latency.P99) / 1000, true
			}
		}
	case "iperf3 tcp", "iperf3 udp", "ping":
		proto := map[string]string{"iperf3 tcp": "tcp", "iperf3 udp": "udp", "ping": "icmp"}[measure]
		for _, c := range m.Run.Iperf {
			if c.Scenario == sc && c.Tool == tool && c.Protocol == proto && c.Carried && len(c.Trials) > 0 {
				return c.Mean, true
			}
		}
	}
	return 0, false
}

// seriesPlot draws one line per tool over categories (x), values from val.
func (m *model) seriesPlot(title, ylabel string, xs []string, tools []string, val func(x, tool string) (float64, bool)) ([]byte, error) {
	p := NewPlot()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	hi := 0.0
	drawn := 0
	for ti, t := range tools {
		var pts plotter.XYs
		for i, x := range xs {
			if v, ok := val(x, t); ok && !math.IsNaN(v) {
				// Spread the tools a little so their points do not hide
				// each other.
				pts = append(pts, plotter.XY{X: float64(i) + 0.06*(float64(ti)-float64(len(tools)-1)/2), Y: v})
				hi = max(hi, v)
			}
		}
		if len(pts) == 0 {
			continue
		}
		// Points only: the categories (scenarios) are not a continuum.
		scatter, err := plotter.NewScatter(pts)
		if err != nil {
			return nil, err
		}
		col := toolColor(tools, t)
		scatter.Color, scatter.Shape, scatter.Radius = col, draw.CircleGlyph{}, vg.Points(4)
		p.Add(scatter)
		p.Legend.Add(t, scatter)
		drawn++
	}
	if drawn == 0 {
		return nil, nil
	}
	var ticks []plot.Tick
	for i, x := range xs {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: x})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = -0.5, float64(len(xs))-0.5
	p.Y.Min, p.Y.Max = 0, hi*1.15
	p.Legend.Top = true
	p.Legend.Padding = vg.Points(2)
	return RenderSVG(p)
}

// extraPlots renders the iperf3, stream and rate figures.
func (m *model) extraPlots() error {
	tools := m.allTools()
	if v := m.Iperf; v != nil {
		var protos []string
		for _, c := range m.Run.Iperf {
			if !slices.Contains(protos, c.Protocol) {
				protos = append(protos, c.Protocol)
			}
		}
		for _, proto := range protos {
			unit := "Gbit/s (receiver)"
			if proto == "icmp" {
				unit = "ms round trip (ping)"
			}
			svg, err := m.seriesPlot(fmt.Sprintf("%s: mean over trials per scenario", proto), unit, m.scenarios, tools, func(sc, t string) (float64, bool) {
				for _, c := range m.Run.Iperf {
					if c.Scenario == sc && c.Tool == t && c.Protocol == proto && c.Carried && len(c.Trials) > 0 {
						return c.Mean, true
					}
				}
				return 0, false
			})
			if err != nil {
				return err
			}
			v.Figures = append(v.Figures, figure{ID: "iperf-" + proto, SVG: svg,
				Caption: fmt.Sprintf("%s through every tool that carries it, mean of the trials, per scenario; a tool without a point here does not carry %s.", proto, proto)})
		}
	}
	if tv := m.Throughput; tv != nil && len(tv.Bulk) > 0 {
		var xs []string
		for _, c := range tv.Bulk {
			x := c.Scenario + " ×" + strconv.Itoa(c.Streams)
			if !slices.Contains(xs, x) {
				xs = append(xs, x)
			}
		}
		svg, err := m.seriesPlot("bulk TCP throughput (mean over repetitions)", "Gbit/s", xs, tools, func(x, t string) (float64, bool) {
			for _, c := range tv.Bulk {
				if c.Scenario+" ×"+strconv.Itoa(c.Streams) == x && c.Tool == t {
					return c.MeanGbps, true
				}
			}
			return 0, false
		})
		if err != nil {
			return err
		}
		tv.Figure = &figure{ID: "throughput-plot", SVG: svg, Caption: "Bulk TCP throughput with 1..N parallel streams per scenario and tool."}
	}
	if len(m.RateViews) > 0 {
		var xs []string
		for _, rv := range m.RateViews {
			for _, row := range rv.Rows {
				x := row.Scenario + " " + fmtNum(row.Rate) + "/s"
				if !slices.Contains(xs, x) {
					xs = append(xs, x)
				}
			}
		}
		svg, err := m.seriesPlot("open-loop latency p99 (coordinated omission corrected)", "p99 (ms)", xs, tools, func(x, t string) (float64, bool) {
			for _, c := range m.Run.Rate {
				if c.Scenario+" "+fmtNum(c.Rate)+"/s" == x && c.Tool == t && c.Count > 0 {
					return float64(c.Latency.P99) / 1000, true
				}
			}
			return 0, false
		})
		if err != nil {
			return err
		}
		m.RateFigure = &figure{ID: "rate-plot", SVG: svg, Caption: "p99 latency at each target rate per scenario and tool."}
	}
	return nil
}

// allTools lists every tool of the run, direct first.
func (m *model) allTools() []string {
	var ts []string
	add := func(t string) {
		if !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	for _, t := range m.tools {
		add(t)
	}
	for _, c := range m.Run.Rate {
		add(c.Tool)
	}
	for _, c := range m.Run.Throughput {
		add(c.Tool)
	}
	for _, c := range m.Run.Iperf {
		add(c.Tool)
	}
	slices.SortStableFunc(ts, func(a, b string) int { return b2i(a != report.Baseline) - b2i(b != report.Baseline) })
	return ts
}

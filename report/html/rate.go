package html

import (
	"slices"

	"github.com/strait-net/strait/report"
)

// rateView is one open-loop table: a workload, payload and target rate,
// one row per scenario and tool, one column per latency statistic.
type rateView struct {
	ID       string
	Workload string
	Payload  int
	Rate     float64
	KPI      float64 // ms; 0 without one
	Rows     []rateRow
}

// rateRow is a scenario and tool's merged percentiles (ms), each with its
// ratio to direct's.
type rateRow struct {
	report.RateSummary
	Values []rateValue
}

type rateValue struct {
	MS       float64
	Ratio    float64
	HasRatio bool
	Over     bool // above the workload's KPI
}

// rateLabels name the columns of rateRow.Values.
var rateLabels = report.RatePercentileLabels

func (m *model) rateViews() []*rateView {
	cells := m.Run.Rate
	if len(cells) == 0 {
		return nil
	}
	key := func(c report.RateSummary) report.RateCell { k := c.RateCell; k.Tool = ""; return k }
	tool := func(c report.RateSummary) string { return c.Tool }
	ratios := make([]func(report.RateSummary) (float64, bool), len(rateLabels))
	for i := range rateLabels {
		ratios[i] = report.RatioToDirect(cells, key, tool, func(c report.RateSummary) float64 {
			if c.Count == 0 {
				return 0
			}
			return report.RatePercentiles(c.Latency)[i]
		})
	}
	type group struct {
		workload string
		payload  int
		rate     float64
	}
	var groups []group
	rows := map[group][]report.RateSummary{}
	for _, c := range cells {
		g := group{c.Workload, c.Payload, c.Rate}
		if _, ok := rows[g]; !ok {
			groups = append(groups, g)
		}
		rows[g] = append(rows[g], c)
	}
	var views []*rateView
	for _, g := range groups {
		v := &rateView{ID: "rate-" + g.workload + "-" + report.FormatSize(g.payload) + "-" + fmtNum(g.rate), Workload: g.workload, Payload: g.payload, Rate: g.rate}
		if kpi, ok := m.kpi(g.workload); ok {
			v.KPI = kpi
		}
		rs := rows[g]
		// Scenarios in the run's order, direct first within each.
		slices.SortStableFunc(rs, func(a, b report.RateSummary) int {
			if d := m.scenarioIndex(a.Scenario) - m.scenarioIndex(b.Scenario); d != 0 {
				return d
			}
			return b2i(a.Tool != report.Baseline) - b2i(b.Tool != report.Baseline)
		})
		for _, c := range rs {
			row := rateRow{RateSummary: c}
			for i, ms := range report.RatePercentiles(c.Latency) {
				r, ok := ratios[i](c)
				row.Values = append(row.Values, rateValue{MS: ms, Ratio: r, HasRatio: ok, Over: v.KPI > 0 && c.Count > 0 && ms > v.KPI})
			}
			v.Rows = append(v.Rows, row)
		}
		views = append(views, v)
	}
	return views
}

// scenarioIndex orders scenarios as the run lists them; unknown ones last.
func (m *model) scenarioIndex(s string) int {
	if i := slices.Index(m.scenarios, s); i >= 0 {
		return i
	}
	return len(m.scenarios)
}

// throughputView is the stream results: bulk rows and rr rows, each with
// the ratio to direct.
type throughputView struct {
	Bulk, RR []throughputRow
	Figure   *figure
}

type throughputRow struct {
	report.ThroughputSummary
	Lo, Hi   float64
	CI       string // of the mean over the runs (report.MeanCI)
	Ratio    float64
	RatioCI  report.Interval // report.RatioCI
	HasRatio bool
}

func (m *model) throughputView() *throughputView {
	cells := slices.Clone(m.Run.Throughput)
	if len(cells) == 0 {
		return nil
	}
	slices.SortStableFunc(cells, func(a, b report.ThroughputSummary) int {
		if d := m.scenarioIndex(a.Scenario) - m.scenarioIndex(b.Scenario); d != 0 {
			return d
		}
		return b2i(a.Tool != report.Baseline) - b2i(b.Tool != report.Baseline)
	})
	ratio := report.ThroughputRatio(cells)
	v := &throughputView{}
	for _, c := range cells {
		row := throughputRow{ThroughputSummary: c}
		row.Lo, row.Hi = c.Range()
		row.CI = report.FormatCI(c.ValueCI(), 3)
		if c.RR > 0 {
			row.CI = report.FormatCI(c.ValueCI(), 1)
		}
		row.Ratio, row.RatioCI, row.HasRatio = ratio(c)
		if c.RR > 0 {
			v.RR = append(v.RR, row)
		} else {
			v.Bulk = append(v.Bulk, row)
		}
	}
	return v
}

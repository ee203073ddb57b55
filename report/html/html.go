package html

import (
	"cmp"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

//go:embed report.html.tmpl
var pageText string

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"size": report.FormatSize,
	"ms":   fmtMS,
	"ci":   fmtCI,
	"ratio": func(v float64) string {
		if math.IsNaN(v) {
			return "–"
		}
		return strconv.FormatFloat(v, 'f', 3, 64) + "×"
	},
	"pct":   func(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + " %" },
	"level": func(l float64) string { return fmtNum(100*l) + " %" },
	"ciClass": func(iv report.Interval) string {
		switch {
		case !iv.Valid():
			return ""
		case iv.Lo > 1:
			return " slower"
		case iv.Hi < 1:
			return " faster"
		}
		return ""
	},
	"svg": func(b []byte) template.HTML { return template.HTML(b) },
	"json": func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	},
	"f1": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	// A rate cell's connections and the shortfall that flags it.
	"conns":     report.ConnectionsText,
	"shortfall": func() string { return fmtNum(100*report.RateShortfall) + " %" },
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05 MST")
	},
	"sortedKeys": func(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) },
	"anyKeys":    func(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) },
	"num":        fmtNum,
	// Node addresses and pod CIDRs are recorded comma separated.
	"commas": func(s string) string { return strings.ReplaceAll(s, ",", ", ") },
	"f3":     func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) },
	"show": func(v any) string {
		if v == nil || v == "" {
			return "–"
		}
		return fmt.Sprint(v)
	},
}).Parse(pageText))

// Write renders run as one self-contained HTML page.
func Write(w io.Writer, run Run) error {
	if err := run.Bootstrap.Validate(); err != nil {
		return err
	}
	m, err := newModel(run)
	if err != nil {
		return err
	}
	if err := m.plot(); err != nil {
		return err
	}
	if err := m.extraPlots(); err != nil {
		return err
	}
	if m.Soak, err = m.soakViews(); err != nil {
		return err
	}
	if err := page.Execute(w, m); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// model is the page's data: the run reordered for display, with every
// cell's statistics.
type model struct {
	Run       Run
	scenarios []string
	tools     []string
	Workloads []*workloadView
	cells     map[cellKey]*cellStats
	Cells     []*cellStats // display order
	Generated time.Time
	Level     float64
	Resamples int
	// RateViews are the open-loop percentile tables; Throughput the
	// stream tables (nil when not measured).
	RateViews  []*rateView
	RateLabels []string
	Throughput *throughputView
	// Iperf is seed 004's table and plots; Usage and ToolUsage the CPU
	// and memory tables; Reference another testbed's figures beside ours.
	Iperf      *iperfView
	RateFigure *figure
	Usage      []usageRow
	ToolUsage  []toolUsageRow
	Reference  []referenceRow
	// Soak are the soak sections (README "Soak"), nil without.
	Soak []*soakView
	// Clusters is a run on Kubernetes clusters' section; nil for a run
	// in the namespace lab.
	Clusters *clustersView
}

type cellKey struct {
	scenario, tool, workload string
	payload                  int
}

// cellStats is one cell's numbers. Times are in milliseconds.
type cellStats struct {
	Scenario, Tool, Workload string
	Payload                  int
	Summary                  report.Summary
	times                    []float64 // successful requests, sorted
	MedianCI, IQRMeanCI      report.Interval
	intervals                report.CellIntervals
	// Ratios to direct's cell of the same scenario, workload and payload;
	// HasRatio is false for direct and where direct was not measured.
	HasRatio               bool
	RatioIQRMean, RatioMed float64
	RatioIQRCI, RatioMedCI report.Interval
	HasKPI                 bool
	KPI                    float64
	OverKPI                float64 // fraction of successful requests slower than the KPI
}

// OverMedian reports whether the cell's median misses its KPI, the test
// seed 000 applies.
func (c *cellStats) OverMedian() bool {
	return c.HasKPI && c.Summary.OK > 0 && c.Summary.MedianMS > c.KPI
}

// OverIQR reports whether the IQR mean misses the KPI.
func (c *cellStats) OverIQR() bool {
	return c.HasKPI && c.Summary.OK > 0 && c.Summary.IQRMeanMS > c.KPI
}

// workloadView groups a workload's plots and tables.
type workloadView struct {
	Name         string
	KPI          float64
	HasKPI       bool
	Payloads     []int
	Scenarios    []string
	Tools        []string
	Others       []string // tools but direct, for the ratio table
	HasDirect    bool
	BoxPlots     []figure
	PayloadPlots []figure
	m            *model
}

type figure struct {
	ID, Caption string
	SVG         []byte
}

// Cell returns a cell of the workload for the tables; nil if unmeasured.
func (w *workloadView) Cell(scenario, tool string, payload int) *cellStats {
	return w.m.cell(scenario, tool, w.Name, payload)
}

func (m *model) cell(scenario, tool, workload string, payload int) *cellStats {
	return m.cells[cellKey{scenario, tool, workload, payload}]
}

func (m *model) kpi(workload string) (float64, bool) {
	kpis := m.Run.KPIs
	if kpis == nil {
		kpis = DefaultKPIs
	}
	v, ok := kpis[workload]
	return v, ok && v > 0
}

// KPIList names the response-time limits the report flags against.
func (m *model) KPIList() string {
	kpis := m.Run.KPIs
	if kpis == nil {
		kpis = DefaultKPIs
	}
	if len(kpis) == 0 {
		return "none"
	}
	var s string
	for i, w := range slices.Sorted(maps.Keys(kpis)) {
		if i > 0 {
			s += "; "
		}
		s += w + " " + fmtNum(kpis[w]) + " ms"
	}
	return s
}

func newModel(run Run) (*model, error) {
	if len(run.Cells) == 0 && len(run.Rate) == 0 && len(run.Throughput) == 0 && len(run.Iperf) == 0 && len(run.Soak) == 0 {
		return nil, fmt.Errorf("write report: run has no cells, rate, throughput, iperf3 or soak results")
	}
	m := &model{Run: run, cells: map[cellKey]*cellStats{}, Generated: time.Now().UTC(),
		Level: 0.95, Resamples: report.DefaultResamples, Clusters: newClustersView(run.Metadata.Clusters)}
	if run.Bootstrap.Level != 0 {
		m.Level = run.Bootstrap.Level
	}
	if run.Bootstrap.Resamples != 0 {
		m.Resamples = run.Bootstrap.Resamples
	}
	m.scenarios = append(m.scenarios, run.Scenarios...)
	var workloads []string
	payloads := map[string][]int{}
	for _, c := range run.Cells {
		k := cellKey{c.Scenario, c.Tool, c.Workload, c.Payload}
		cs := m.cells[k]
		if cs == nil {
			cs = &cellStats{Scenario: c.Scenario, Tool: c.Tool, Workload: c.Workload, Payload: c.Payload}
			m.cells[k] = cs
		}
		if !slices.Contains(m.scenarios, c.Scenario) {
			m.scenarios = append(m.scenarios, c.Scenario)
		}
		if !slices.Contains(m.tools, c.Tool) {
			m.tools = append(m.tools, c.Tool)
		}
		if !slices.Contains(workloads, c.Workload) {
			workloads = append(workloads, c.Workload)
		}
		if !slices.Contains(payloads[c.Workload], c.Payload) {
			payloads[c.Workload] = append(payloads[c.Workload], c.Payload)
		}
	}
	measured := map[string]bool{}
	for k := range m.cells {
		measured[k.scenario] = true
	}
	for _, c := range run.Rate {
		measured[c.Scenario] = true
	}
	for _, c := range run.Throughput {
		measured[c.Scenario] = true
	}
	for _, c := range run.Iperf {
		measured[c.Scenario] = true
	}
	for _, sc := range slices.Sorted(maps.Keys(measured)) {
		if !slices.Contains(m.scenarios, sc) {
			m.scenarios = append(m.scenarios, sc)
		}
	}
	// Drop listed scenarios that were not measured (a cancelled run).
	m.scenarios = slices.DeleteFunc(m.scenarios, func(s string) bool { return !measured[s] })
	// direct first: it is the baseline every ratio refers to.
	slices.SortStableFunc(m.tools, func(a, b string) int {
		return cmp.Compare(b2i(a != "direct"), b2i(b != "direct"))
	})
	// Summaries come from report.Summarize on the merged samples, so the
	// page and the run's table.txt agree.
	merged := map[cellKey][]load.Sample{}
	for _, c := range run.Cells {
		k := cellKey{c.Scenario, c.Tool, c.Workload, c.Payload}
		merged[k] = append(merged[k], c.Samples...)
	}
	for k, cs := range m.cells {
		cs.Summary = report.Summarize(merged[k])
		cs.times = report.Times(merged[k])
		if v, ok := m.kpi(k.workload); ok {
			cs.HasKPI, cs.KPI = true, v
			n := 0
			for _, t := range cs.times {
				if t > v {
					n++
				}
			}
			if len(cs.times) > 0 {
				cs.OverKPI = float64(n) / float64(len(cs.times))
			}
		}
	}
	m.bootstrap()
	m.RateViews, m.RateLabels, m.Throughput = m.rateViews(), rateLabels, m.throughputView()
	for _, w := range workloads {
		pl := slices.Sorted(slices.Values(payloads[w]))
		wv := &workloadView{Name: w, Payloads: pl, Scenarios: m.scenarios, Tools: m.tools, m: m}
		wv.KPI, wv.HasKPI = m.kpi(w)
		for _, t := range m.tools {
			if t == "direct" {
				wv.HasDirect = true
			} else {
				wv.Others = append(wv.Others, t)
			}
		}
		m.Workloads = append(m.Workloads, wv)
		for _, sc := range m.scenarios {
			for _, p := range pl {
				for _, t := range m.tools {
					if c := m.cell(sc, t, w, p); c != nil {
						m.Cells = append(m.Cells, c)
					}
				}
			}
		}
	}
	return m, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// bootstrap computes every cell's intervals on all CPUs, each cell with
// its own seed (report.Bootstrap.CellSeed).
func (m *model) bootstrap() {
	keys := slices.Collect(maps.Keys(m.cells))
	work := make(chan cellKey)
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for k := range work {
				cs := m.cells[k]
				cs.intervals = m.Run.Bootstrap.CellSeed(k.scenario, k.tool, k.workload, k.payload).Cell(cs.times)
				cs.MedianCI, cs.IQRMeanCI = cs.intervals.Median, cs.intervals.IQRMean
			}
		})
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	b := m.Run.Bootstrap
	nan := math.NaN()
	for k, cs := range m.cells {
		cs.RatioIQRMean, cs.RatioMed = nan, nan
		if k.tool == "direct" {
			continue
		}
		d := m.cell(k.scenario, "direct", k.workload, k.payload)
		if d == nil || d.Summary.OK == 0 || cs.Summary.OK == 0 {
			continue
		}
		cs.HasRatio = true
		if d.Summary.IQRMeanMS > 0 {
			cs.RatioIQRMean = cs.Summary.IQRMeanMS / d.Summary.IQRMeanMS
		}
		if d.Summary.MedianMS > 0 {
			cs.RatioMed = cs.Summary.MedianMS / d.Summary.MedianMS
		}
		cs.RatioIQRCI, cs.RatioMedCI = b.CellRatio(cs.intervals, d.intervals)
	}
}

// plot renders the figures, several at a time.
func (m *model) plot() error {
	type job struct {
		fig    *figure
		render func() ([]byte, error)
	}
	var jobs []job
	m.Iperf = m.iperfView()
	m.Usage, m.ToolUsage, m.Reference = m.usageRows(), m.toolUsageRows(), m.referenceRows()
	for _, w := range m.Workloads {
		w.BoxPlots = make([]figure, len(w.Payloads))
		for i, p := range w.Payloads {
			w.BoxPlots[i] = figure{
				ID:      fmt.Sprintf("box-%s-%s", w.Name, report.FormatSize(p)),
				Caption: fmt.Sprintf("Response time of %s with payload %s per scenario and tool. Boxes: quartiles and median (type 7); whiskers: farthest values within 1.5 IQR; points: outliers.", w.Name, report.FormatSize(p)),
			}
			jobs = append(jobs, job{&w.BoxPlots[i], func() ([]byte, error) { return m.boxPlot(w.Name, p) }})
		}
		var positive []int
		for _, p := range w.Payloads {
			if p > 0 {
				positive = append(positive, p)
			}
		}
		if len(positive) < 2 {
			continue
		}
		w.PayloadPlots = make([]figure, len(m.scenarios))
		for i, sc := range m.scenarios {
			w.PayloadPlots[i] = figure{
				ID:      fmt.Sprintf("payload-%s-%s", w.Name, sc),
				Caption: fmt.Sprintf("IQR mean response time of %s against payload size in scenario %s; error bars: %s %% bootstrap confidence interval.", w.Name, sc, fmtNum(100*m.Level)),
			}
			jobs = append(jobs, job{&w.PayloadPlots[i], func() ([]byte, error) { return m.payloadPlot(w.Name, sc, positive) }})
		}
	}
	errs := make([]error, len(jobs))
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			svg, err := j.render()
			if err != nil {
				errs[i] = fmt.Errorf("plot %s: %w", j.fig.ID, err)
			}
			j.fig.SVG = svg
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func fmtMS(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// fmtCI prints an interval as [lo, hi], or "–" when it is undefined.
func fmtCI(iv report.Interval) string {
	if !iv.Valid() {
		return "–"
	}
	return "[" + strconv.FormatFloat(iv.Lo, 'f', 3, 64) + ", " + strconv.FormatFloat(iv.Hi, 'f', 3, 64) + "]"
}

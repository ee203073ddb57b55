package html

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// SoakFile is the run directory's file of soak results (SoakResult).
const SoakFile = "soak.json"

// SoakResult is one soak (README "Soak"): a tool under mixed load for a
// long run, its gateways' resources and the clients' latency sampled every
// IntervalSec, and the verdict on each series after the warm-up.
type SoakResult struct {
	Scenario string `json:"scenario"`
	Tool     string `json:"tool"`
	Rep      int    `json:"rep"`
	// DurationSec is the planned length, IntervalSec the sampling period;
	// WarmupSec the leading part the verdict ignores; Tolerance the
	// allowed relative deviation from each series' post-warm-up median.
	DurationSec float64 `json:"duration_s"`
	IntervalSec float64 `json:"interval_s"`
	WarmupSec   float64 `json:"warmup_s"`
	Tolerance   float64 `json:"tolerance"`
	// Load describes the mixed load in words, for the report.
	Load string `json:"load"`
	// Requests and Errors count every client request of the soak (rate,
	// churn and bulk); Corrupted those whose echoed bytes differed;
	// BulkBytes the bytes the bulk stream sent and got back verified;
	// Connections the new connections the churn loop opened.
	Requests    int64  `json:"requests"`
	Errors      int64  `json:"errors"`
	Corrupted   int64  `json:"corrupted"`
	BulkBytes   int64  `json:"bulk_bytes"`
	Connections int64  `json:"churn_connections"`
	FirstError  string `json:"first_error,omitempty"`
	// AnsweredRate is the fixed-rate client's requests answered per
	// second; AchievedRate those that ended, answered or failed, per
	// second (load.RateResult's fields of those names). The report shows
	// AnsweredRate.
	AnsweredRate float64      `json:"answered_rate"`
	AchievedRate float64      `json:"achieved_rate"`
	Series       []SoakSeries `json:"series"`
	// Pass: every series within tolerance after the warm-up, no failed
	// request and no corrupted byte.
	Pass bool `json:"pass"`
}

// SoakSeries is one quantity over time and its verdict.
type SoakSeries struct {
	// Name says what and where, e.g. "a/gw rss"; Unit its unit.
	Name string    `json:"name"`
	Unit string    `json:"unit"`
	T    []float64 `json:"t_s"` // seconds since the soak started
	V    []float64 `json:"v"`
	// Median is the median after the warm-up; MinDev and MaxDev the
	// extreme relative deviations from it there (e.g. -0.04, 0.07);
	// Slack an absolute allowance (a few goroutines or descriptors of
	// in-flight connections) within which a deviation passes whatever its
	// relative size; Drift the last third's median relative to the first
	// third's, after the warm-up.
	Median float64 `json:"median"`
	MinDev float64 `json:"min_dev"`
	MaxDev float64 `json:"max_dev"`
	Slack  float64 `json:"slack"`
	Drift  float64 `json:"drift"`
	// Criterion is how the series is judged: "band" (every sample after
	// the warm-up within tolerance or slack of the median: resources) or
	// "drift" (the last third's median within tolerance or slack of the
	// first third's: latency percentiles, whose per-interval values on a
	// shared host scatter far more than 10 % with no trend).
	Criterion string `json:"criterion"`
	// Judged is whether the verdict includes this series (one with fewer
	// than three samples after the warm-up is not judged).
	Judged bool `json:"judged"`
	Pass   bool `json:"pass"`
}

// Criteria of SoakSeries.
const (
	Band  = "band"
	Drift = "drift"
)

// Judge computes s's statistics and its verdict by s.Criterion after
// warmup seconds.
func (s *SoakSeries) Judge(warmup, tolerance, slack float64) {
	var post []float64
	for i, t := range s.T {
		if t >= warmup && i < len(s.V) {
			post = append(post, s.V[i])
		}
	}
	s.Slack = slack
	s.Judged = len(post) >= 3
	s.Pass = true
	if !s.Judged {
		return
	}
	s.Median = median(post)
	s.MinDev, s.MaxDev = 0, 0
	ok := func(v float64) bool {
		return math.Abs(v-s.Median) <= slack || s.Median != 0 && math.Abs(v-s.Median)/math.Abs(s.Median) <= tolerance
	}
	for _, v := range post {
		if s.Median != 0 {
			d := (v - s.Median) / math.Abs(s.Median)
			s.MinDev, s.MaxDev = min(s.MinDev, d), max(s.MaxDev, d)
		}
		if s.Criterion != Drift && !ok(v) {
			s.Pass = false
		}
	}
	third := len(post) / 3
	first, last := median(post[:third]), median(post[len(post)-third:])
	if first != 0 {
		s.Drift = last/first - 1
	}
	if s.Criterion == Drift {
		s.Pass = math.Abs(last-first) <= slack || first != 0 && math.Abs(s.Drift) <= tolerance
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// soakView is one soak's section of the page.
type soakView struct {
	SoakResult
	ID    string
	Plots []soakPlot
}

type soakPlot struct {
	Title string
	SVG   []byte
}

// soakViews plots every soak: one plot per unit (resources and latency
// apart), each series with its post-warm-up median's tolerance band.
func (m *model) soakViews() ([]*soakView, error) {
	var out []*soakView
	for i, r := range m.Run.Soak {
		v := &soakView{SoakResult: r, ID: "soak-" + strconv.Itoa(i)}
		byUnit := map[string][]SoakSeries{}
		var units []string
		for _, s := range r.Series {
			if _, ok := byUnit[s.Unit]; !ok {
				units = append(units, s.Unit)
			}
			byUnit[s.Unit] = append(byUnit[s.Unit], s)
		}
		for _, u := range units {
			svg, err := soakPlotOf(byUnit[u], u, r.WarmupSec)
			if err != nil {
				return nil, fmt.Errorf("soak %s %s: %w", r.Tool, u, err)
			}
			v.Plots = append(v.Plots, soakPlot{Title: u, SVG: svg})
		}
		out = append(out, v)
	}
	return out, nil
}

var soakColors = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff},
	{0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff},
}

func soakPlotOf(series []SoakSeries, unit string, warmup float64) ([]byte, error) {
	p := NewPlot()
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = unit
	p.Y.Min = 0
	hi := 0.0
	for i, s := range series {
		pts := make(plotter.XYs, 0, len(s.T))
		for j := range min(len(s.T), len(s.V)) {
			if !math.IsNaN(s.V[j]) && !math.IsInf(s.V[j], 0) {
				pts = append(pts, plotter.XY{X: s.T[j], Y: s.V[j]})
				hi = max(hi, s.V[j])
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = soakColors[i%len(soakColors)]
		l.Width = vg.Points(1.2)
		p.Add(l)
		name := s.Name
		if s.Judged && !s.Pass {
			name += " (failed)"
		}
		p.Legend.Add(name, l)
	}
	if hi > 0 {
		p.Y.Max = hi * 1.15
	}
	if warmup > 0 {
		wl, err := plotter.NewLine(plotter.XYs{{X: warmup, Y: 0}, {X: warmup, Y: max(hi*1.15, 1)}})
		if err != nil {
			return nil, err
		}
		wl.Color = color.RGBA{0x99, 0x99, 0x99, 0xff}
		wl.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(wl)
		p.Legend.Add("end of warm-up", wl)
	}
	p.Legend.Top = false
	p.Legend.Left = true
	return RenderSVG(p)
}

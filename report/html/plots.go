package html

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/strait-net/strait/report"
)

// Plot size: wide enough for six scenarios of several tools, and scaled
// to the page's width by the browser.
const (
	plotWidth  = 7.5 * vg.Inch
	plotHeight = 3.6 * vg.Inch
)

// logSpread is the max/min ratio from which a y axis becomes logarithmic:
// a KPI line at 1000 ms over 5 ms boxes would flatten a linear axis.
const logSpread = 20

// palette gives each tool a color; direct, the baseline, is gray as in
// the seeds' figures.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x8c, 0x56, 0x4b, 0xff}, // brown
}

var gray = color.RGBA{0x55, 0x55, 0x55, 0xff}

func toolColor(tools []string, tool string) color.RGBA {
	if tool == "direct" {
		return gray
	}
	i := 0
	for _, t := range tools {
		if t == tool {
			break
		}
		if t != "direct" {
			i++
		}
	}
	return palette[i%len(palette)]
}

func lighten(c color.RGBA) color.RGBA {
	mix := func(v uint8) uint8 { return uint8(int(v) + (255-int(v))*3/5) }
	return color.RGBA{mix(c.R), mix(c.G), mix(c.B), 0xff}
}

var kpiColor = color.RGBA{0xc0, 0x00, 0x00, 0xff}

// NewPlot makes a plot in sans-serif type, which reads better on screen
// than gonum's default serif at these sizes.
func NewPlot() *plot.Plot {
	p := plot.New()
	sans := func(f *font.Font, size vg.Length) {
		f.Typeface, f.Variant, f.Size = "Liberation", "Sans", size
	}
	sans(&p.Title.TextStyle.Font, 12)
	p.Title.Padding = vg.Points(6)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		sans(&a.Label.TextStyle.Font, 11)
		sans(&a.Tick.Label.Font, 10)
	}
	sans(&p.Legend.TextStyle.Font, 10)
	return p
}

// boxPlot draws response time per scenario, boxes grouped by tool: seed
// 000's Figs 3, 4, 6, 7, 9 for one workload and payload.
func (m *model) boxPlot(workload string, payload int) ([]byte, error) {
	p := NewPlot()
	p.Title.Text = fmt.Sprintf("%s, payload %s: response time per scenario", workload, report.FormatSize(payload))
	p.X.Label.Text = "scenario"
	p.Y.Label.Text = "response time (ms)"
	nsc, ntool := len(m.scenarios), len(m.tools)
	// Slot width of one scenario in points, roughly: the plot less its y
	// axis and margins.
	slot := (plotWidth - 0.9*vg.Inch) / vg.Length(nsc)
	boxW := min(slot*0.75/vg.Length(ntool), 36)
	lo, hi := math.Inf(1), math.Inf(-1)
	for ti, tool := range m.tools {
		col := toolColor(m.tools, tool)
		var thumb *plotter.Polygon
		for si, sc := range m.scenarios {
			c := m.cell(sc, tool, workload, payload)
			if c == nil || len(c.times) == 0 {
				continue
			}
			b, err := plotter.NewBoxPlot(boxW, float64(si), plotter.Values(c.times))
			if err != nil {
				return nil, err
			}
			tukey(b, c.times)
			b.Offset = (vg.Length(ti) - vg.Length(ntool-1)/2) * boxW * 1.15
			b.FillColor = lighten(col)
			b.BoxStyle.Color = col
			b.BoxStyle.Width = vg.Points(1)
			b.MedianStyle.Color = col
			b.MedianStyle.Width = vg.Points(2)
			b.WhiskerStyle.Color = col
			b.GlyphStyle.Color = col
			b.GlyphStyle.Radius = vg.Points(1.5)
			b.GlyphStyle.Shape = draw.CircleGlyph{}
			p.Add(b)
			lo, hi = min(lo, c.times[0]), max(hi, c.times[len(c.times)-1])
			if thumb == nil {
				thumb, _ = plotter.NewPolygon(plotter.XYs{{X: 0, Y: 0}})
				thumb.Color = lighten(col)
				thumb.LineStyle.Color = col
			}
		}
		if thumb != nil {
			p.Legend.Add(tool, thumb)
		}
	}
	if math.IsInf(lo, 0) {
		return nil, nil
	}
	if kpi, ok := m.kpi(workload); ok {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: kpi}, {X: float64(nsc) - 0.5, Y: kpi}})
		if err != nil {
			return nil, err
		}
		l.Color = kpiColor
		l.Width = vg.Points(1.2)
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("KPI %s ms", fmtNum(kpi)), l)
		lo, hi = min(lo, kpi), max(hi, kpi)
	}
	var ticks []plot.Tick
	for i, sc := range m.scenarios {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: sc})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = -0.5, float64(nsc)-0.5
	yAxis(p, lo, hi)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), vg.Points(-4)
	p.Legend.ThumbnailWidth = vg.Points(14)
	p.Legend.Padding = vg.Points(2)
	return RenderSVG(p)
}

// tukey replaces gonum's quartiles (medians of halves) with the report's
// type 7 quantiles, so the boxes show the numbers in the tables; whiskers
// reach the farthest values within 1.5 IQR of the box, the rest are
// outliers. sorted holds the same values as b.Values, sorted.
func tukey(b *plotter.BoxPlot, sorted []float64) {
	b.Quartile1 = report.Quantile(sorted, 0.25)
	b.Median = report.Quantile(sorted, 0.5)
	b.Quartile3 = report.Quantile(sorted, 0.75)
	iqr := b.Quartile3 - b.Quartile1
	fenceLo, fenceHi := b.Quartile1-1.5*iqr, b.Quartile3+1.5*iqr
	b.AdjLow, b.AdjHigh = math.Inf(1), math.Inf(-1)
	b.Outside = b.Outside[:0]
	for i, v := range b.Values {
		if v < fenceLo || v > fenceHi {
			b.Outside = append(b.Outside, i)
			continue
		}
		b.AdjLow, b.AdjHigh = min(b.AdjLow, v), max(b.AdjHigh, v)
	}
}

// yAxis sets the y range to [lo, hi] with some room, logarithmic when the
// values spread over more than logSpread.
func yAxis(p *plot.Plot, lo, hi float64) {
	if lo > 0 && hi/lo > logSpread {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.Y.Min, p.Y.Max = lo/1.25, hi*1.25
		p.Y.Label.Text += ", log scale"
		return
	}
	pad := (hi - lo) * 0.08
	if pad == 0 {
		pad = max(math.Abs(hi)*0.1, 0.001)
	}
	p.Y.Min, p.Y.Max = max(0, lo-pad), hi+pad
	if lo-pad < 0 || lo < (hi-lo) {
		p.Y.Min = 0
	}
}

// logTicks labels 1, 2 and 5 times each power of ten when the axis spans
// few decades, only the powers of ten when it spans many.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	decades := math.Log10(hi / lo)
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		base := math.Pow(10, e)
		for i := 1; i < 10; i++ {
			v := base * float64(i)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if i == 1 || (decades < 3.5 && (i == 2 || i == 5)) {
				t.Label = fmtNum(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// payloadPlot draws the IQR mean against payload size for one scenario,
// one line per tool with its bootstrap interval: seed 000's Figs 5 and 8.
func (m *model) payloadPlot(workload, scenario string, payloads []int) ([]byte, error) {
	p := NewPlot()
	p.Title.Text = fmt.Sprintf("%s, scenario %s: IQR mean response time vs payload (95%% CI)", workload, scenario)
	p.X.Label.Text = "payload (bytes, log scale)"
	p.Y.Label.Text = "IQR mean (ms)"
	p.X.Scale = plot.LogScale{}
	ntool := len(m.tools)
	lo, hi := math.Inf(1), math.Inf(-1)
	for ti, tool := range m.tools {
		col := toolColor(m.tools, tool)
		var pts struct {
			plotter.XYs
			plotter.YErrors
		}
		for _, pl := range payloads {
			c := m.cell(scenario, tool, workload, pl)
			if c == nil || len(c.times) == 0 {
				continue
			}
			// Spread the tools a little along x so error bars do not
			// hide each other.
			x := float64(pl) * math.Pow(1.06, float64(ti)-float64(ntool-1)/2)
			y := c.Summary.IQRMeanMS
			pts.XYs = append(pts.XYs, plotter.XY{X: x, Y: y})
			elo, ehi := 0.0, 0.0
			if c.IQRMeanCI.Valid() {
				elo, ehi = max(0, y-c.IQRMeanCI.Lo), max(0, c.IQRMeanCI.Hi-y)
				lo, hi = min(lo, c.IQRMeanCI.Lo), max(hi, c.IQRMeanCI.Hi)
			}
			pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{elo, ehi})
			lo, hi = min(lo, y), max(hi, y)
		}
		if len(pts.XYs) == 0 {
			continue
		}
		line, scatter, err := plotter.NewLinePoints(pts.XYs)
		if err != nil {
			return nil, err
		}
		line.Color = col
		line.Width = vg.Points(1.5)
		scatter.Color = col
		scatter.Shape = draw.CircleGlyph{}
		scatter.Radius = vg.Points(2.5)
		bars, err := plotter.NewYErrorBars(pts)
		if err != nil {
			return nil, err
		}
		bars.Color = col
		bars.Width = vg.Points(1)
		p.Add(line, scatter, bars)
		p.Legend.Add(tool, line, scatter)
	}
	if math.IsInf(lo, 0) {
		return nil, nil
	}
	if kpi, ok := m.kpi(workload); ok && kpi <= hi*3 {
		// Only when the data come near it: on a payload plot the line is a
		// reference, not the subject.
		l, err := plotter.NewLine(plotter.XYs{{X: float64(payloads[0]) / 1.5, Y: kpi}, {X: float64(payloads[len(payloads)-1]) * 1.5, Y: kpi}})
		if err != nil {
			return nil, err
		}
		l.Color = kpiColor
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("KPI %s ms", fmtNum(kpi)), l)
		hi = max(hi, kpi)
	}
	var ticks []plot.Tick
	for _, pl := range payloads {
		ticks = append(ticks, plot.Tick{Value: float64(pl), Label: report.FormatSize(pl)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = float64(payloads[0])/1.5, float64(payloads[len(payloads)-1])*1.5
	yAxis(p, lo, hi)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), vg.Points(-4)
	p.Legend.Padding = vg.Points(2)
	return RenderSVG(p)
}

// RenderSVG draws p as an SVG element to inline: without the XML prolog,
// with a viewBox so the page can scale it.
func RenderSVG(p *plot.Plot) ([]byte, error) {
	c := vgsvg.New(plotWidth, plotHeight)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("render svg: %w", err)
	}
	b := buf.Bytes()
	if i := bytes.Index(b, []byte("<svg")); i > 0 {
		b = b[i:]
	}
	return b, nil
}

// fmtNum prints a number with at most three decimals and no trailing
// zeros.
func fmtNum(v float64) string {
	s := strconv.FormatFloat(v, 'f', 3, 64)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

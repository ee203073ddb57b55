package multigw

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/strait-net/strait/report/html"
)

// gatewayColors tell the gateways apart: a cluster's gateways share a hue
// family (exporting cluster a blue, importing cluster b orange), so the
// plot reads as seed 003's Fig 13 does — which side a failure hit and how
// its neighbours took over.
var gatewayColors = []color.RGBA{
	{0x1f, 0x4e, 0x9c, 0xff}, {0x4a, 0x90, 0xd9, 0xff}, {0x9c, 0xc3, 0xee, 0xff},
	{0xc4, 0x4e, 0x00, 0xff}, {0xf0, 0x8a, 0x24, 0xff}, {0xf7, 0xc2, 0x8a, 0xff},
}

// loadPlot draws new streams per second per gateway over the run, with the
// kill and the restart marked.
func loadPlot(r *FailoverResult) ([]byte, error) {
	p := html.NewPlot()
	p.Title.Text = fmt.Sprintf("kill -9 %s: new streams per second per gateway", r.Victim)
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "new streams/s"
	p.Legend.Top = true
	var top float64
	for _, row := range r.GatewayLoad {
		for _, v := range row.PerSec {
			top = max(top, v)
		}
	}
	for i, g := range r.Gateways {
		pts := make(plotter.XYs, len(r.GatewayLoad))
		for j, row := range r.GatewayLoad {
			pts[j] = plotter.XY{X: row.AtMs / 1000, Y: row.PerSec[i]}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("gateway %s: %w", g, err)
		}
		l.Color = gatewayColors[i%len(gatewayColors)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(g, l)
	}
	for _, m := range []struct {
		label string
		atMs  float64
	}{{"kill", r.KillOffsetMs}, {"restart", r.RestartOffsetMs}} {
		l, err := plotter.NewLine(plotter.XYs{{X: m.atMs / 1000, Y: 0}, {X: m.atMs / 1000, Y: top * 1.05}})
		if err != nil {
			return nil, err
		}
		l.Color = color.RGBA{0x80, 0x80, 0x80, 0xff}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(m.label, l)
	}
	p.Y.Min = 0
	return html.RenderSVG(p)
}

var loadPage = template.Must(template.New("load").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>strait failover: per-gateway load</title>
<style>body{font-family:sans-serif;max-width:60em;margin:1em auto}svg{width:100%;height:auto}p{margin:.3em 0}</style>
</head><body>
<h1>Failover, {{.Gateways}} gateways per cluster</h1>
{{range .Phases}}<h2>kill -9 {{.R.Victim}}</h2>
<p>New connections ({{.R.Rate}}/s): {{.R.NewLost500}} lost in the 500 ms after the kill, {{printf "%.1f" .R.NewExcess500Ms}} ms of recovery above the loss rate before it; {{.R.NewLost500Restart}} lost in the 500 ms after the restart.</p>
<p>Long-lived connections: {{.R.BrokenConns}} of {{.R.Conns}} broke at the kill (they ran through {{.R.Victim}}); {{.R.LostOnSurvivors}} probes lost on all others.</p>
{{.SVG}}
{{end}}</body></html>
`))

// writeLoadPage writes load.html in dir: for every victim, the recovery
// figures and the per-gateway load plot. The page is self-contained (SVG
// inline), so it opens offline like the lab's other reports.
func writeLoadPage(dir string, gateways int, phases []*FailoverResult) error {
	type phase struct {
		R   *FailoverResult
		SVG template.HTML
	}
	data := struct {
		Gateways int
		Phases   []phase
	}{Gateways: gateways}
	for _, r := range phases {
		svg, err := loadPlot(r)
		if err != nil {
			return fmt.Errorf("plot for %s: %w", r.Victim, err)
		}
		data.Phases = append(data.Phases, phase{R: r, SVG: template.HTML(svg)})
	}
	var buf bytes.Buffer
	if err := loadPage.Execute(&buf, data); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "load.html"), buf.Bytes(), 0o644)
}

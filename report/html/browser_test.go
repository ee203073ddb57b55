package html

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	xhtml "golang.org/x/net/html"

	"github.com/strait-net/strait/internal/testenv"
)

// chromium and runChromium are testenv's, shared with the lab's tests
// that open the reports of real runs.
func chromium(t *testing.T) string { return testenv.Chromium(t) }

func runChromium(t *testing.T, bin string, args ...string) []byte {
	return testenv.RunChromium(t, bin, args...)
}

// TestChromium opens a report in a real browser: the DOM Chromium builds
// must hold every plot as an SVG element, and a screenshot must show them
// drawn in the tools' colors and the KPI line's. Set STRAIT_SCREENSHOT to
// a path to keep the screenshot.
func TestChromium(t *testing.T) {
	bin := chromium(t)
	run := syntheticRun(400, seed000Scenarios, []string{"echo", "static"},
		map[string][]int{"echo": {60, 1000, 100000, 1000000}, "static": {0}})
	addRateAndThroughput(&run, seed000Scenarios)
	addIperfAndUsage(&run, seed000Scenarios)
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, render(t, run), 0o644); err != nil {
		t.Fatal(err)
	}
	url := "file://" + page

	d := parse(t, runChromium(t, bin, "--dump-dom", url))
	figures := d.find(func(n *xhtml.Node) bool { return n.Data == "figure" })
	// 4 echo + 1 static box plots, 6 echo payload plots, the rate and
	// bulk throughput plots, one iperf3 plot per protocol.
	if len(figures) != 16 {
		t.Errorf("browser DOM has %d figures, want 16", len(figures))
	}
	for _, f := range figures {
		svgs := elements(f, "svg")
		if len(svgs) != 1 || svgs[0].Namespace != "svg" {
			t.Errorf("figure %s: %d svg elements (namespace %q)", attr(f, "id"), len(svgs), svgs[0].Namespace)
			continue
		}
		if n := len(elements(svgs[0], "path")); n < 20 {
			t.Errorf("figure %s: %d paths, want a drawn plot", attr(f, "id"), n)
		}
	}
	for _, id := range []string{"table3-echo", "ratio-echo", "cells-table", "rate-echo-1KB-1000", "throughput-bulk", "throughput-rr",
		"iperf-table", "reference-table", "tool-usage", "usage-table"} {
		tab := d.byID(id)
		if tab == nil {
			t.Errorf("browser DOM lacks the table %s", id)
			continue
		}
		// Filled: a header and at least one row of data.
		if rows := elements(tab, "tr"); len(rows) < 2 || len(elements(rows[len(rows)-1], "td")) == 0 {
			t.Errorf("table %s: %d rows, the last without cells", id, len(rows))
		}
	}
	// The open-loop table: a row per scenario and tool, a cell per
	// percentile and the mean.
	if rate := d.byID("rate-echo-1KB-1000"); rate != nil {
		rows := elements(rate, "tr")
		if len(rows) != 1+2*len(seed000Scenarios) || len(elements(rows[1], "td")) != 11+len(rateLabels) {
			t.Errorf("rate table: %d rows, want %d; %d cells per row, want %d", len(rows), 1+2*len(seed000Scenarios), len(elements(rows[1], "td")), 11+len(rateLabels))
		}
	}

	shot := filepath.Join(dir, "report.png")
	if keep := os.Getenv("STRAIT_SCREENSHOT"); keep != "" {
		shot = keep
	}
	runChromium(t, bin, "--hide-scrollbars", "--window-size=1280,2000", "--screenshot="+shot, url)
	fi, err := os.Stat(shot)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < 50_000 {
		t.Errorf("screenshot is %d bytes: a blank page?", fi.Size())
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// The first screen holds the metadata and the first box plot: direct's
	// gray boxes, strait's blue ones and the red KPI line.
	for name, c := range map[string]color.RGBA{
		"strait blue": toolColor([]string{"direct", "strait"}, "strait"),
		"KPI red":     kpiColor,
		"direct gray": gray,
	} {
		if n := countNear(img, c); n < 50 {
			t.Errorf("screenshot: %d pixels of %s %v, want a drawn plot", n, name, c)
		}
	}
	t.Logf("screenshot %s: %d bytes, %v", shot, fi.Size(), img.Bounds().Size())
}

// countNear counts the pixels within a small distance of c.
func countNear(img image.Image, c color.RGBA) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			d := absDiff(r>>8, uint32(c.R)) + absDiff(g>>8, uint32(c.G)) + absDiff(bl>>8, uint32(c.B))
			if d < 24 {
				n++
			}
		}
	}
	return n
}

func absDiff(a, b uint32) uint32 {
	if a > b {
		return a - b
	}
	return b - a
}

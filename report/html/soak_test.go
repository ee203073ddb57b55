package html

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	xhtml "golang.org/x/net/html"
)

func series(crit string, v ...float64) SoakSeries {
	s := SoakSeries{Name: "x", Unit: "u", Criterion: crit}
	for i, x := range v {
		s.T = append(s.T, float64(i))
		s.V = append(s.V, x)
	}
	return s
}

func TestSoakJudge(t *testing.T) {
	for _, tc := range []struct {
		name         string
		s            SoakSeries
		warmup       float64
		slack        float64
		judged, pass bool
	}{
		// The warm-up's 500 is ignored; 95..108 is within ±10 % of 100.
		{"band flat", series(Band, 500, 100, 95, 108, 100, 101, 99), 1, 0, true, true},
		{"band growth", series(Band, 100, 100, 100, 100, 112, 125, 140), 0, 0, true, false},
		{"band slack", series(Band, 20, 30, 20, 25, 20, 20), 0, 16, true, true},
		{"band no slack", series(Band, 20, 30, 20, 25, 20, 20), 0, 0, true, false},
		// Scatter without a trend passes drift, a trend fails it.
		{"drift scatter", series(Drift, 1, 3, 1, 3, 1, 3, 3, 1, 1), 0, 0, true, true},
		{"drift trend", series(Drift, 1, 1, 1, 1.5, 1.5, 1.5, 2, 2, 2), 0, 0, true, false},
		{"drift slack", series(Drift, 0.1, 0.1, 0.1, 0.15, 0.15, 0.15), 0, 0.1, true, true},
		{"too few", series(Band, 1, 100), 0, 0, false, true},
	} {
		s := tc.s
		s.Judge(tc.warmup, 0.1, tc.slack)
		if s.Judged != tc.judged || s.Pass != tc.pass {
			t.Errorf("%s: judged %v pass %v (median %v, dev %v..%v, drift %v); want judged %v pass %v",
				tc.name, s.Judged, s.Pass, s.Median, s.MinDev, s.MaxDev, s.Drift, tc.judged, tc.pass)
		}
	}
	s := series(Band, 500, 100, 95, 110, 100)
	s.Judge(1, 0.1, 0)
	if s.Median != 100 || s.MinDev != -0.05 || s.MaxDev != 0.1 {
		t.Errorf("median %v, deviations %v..%v; want 100, -5 %%..+10 %%", s.Median, s.MinDev, s.MaxDev)
	}
}

// soakRun is a run of one soak with resource and latency series.
func soakRun() Run {
	r := SoakResult{Scenario: "lcl", Tool: "strait", Rep: 1, DurationSec: 60, IntervalSec: 5, WarmupSec: 12, Tolerance: 0.1,
		Load: "1000 requests/s", Requests: 60000, BulkBytes: 5e8, Connections: 2500, AnsweredRate: 1000}
	for _, x := range []struct{ name, unit, crit string }{
		{"a/gw gateway RSS", "RSS MiB", Band}, {"b/gw gateway RSS", "RSS MiB", Band}, {"a/gw gateway fds", "fds", Band},
		{"a/gw gateway goroutines", "goroutines", Band}, {"rate p99", "latency ms", Drift},
	} {
		s := SoakSeries{Name: x.name, Unit: x.unit, Criterion: x.crit}
		for i := range 12 {
			s.T = append(s.T, float64(5*i))
			s.V = append(s.V, 50+float64(i%3))
		}
		s.Judge(r.WarmupSec, r.Tolerance, 0)
		r.Series = append(r.Series, s)
	}
	r.Series[1].V[11] = 90 // b/gw grows at the end
	r.Series[1].Judge(r.WarmupSec, r.Tolerance, 0)
	r.Pass = false
	return Run{Metadata: Metadata{Experiment: "soak"}, Soak: []SoakResult{r}}
}

func TestWriteSoak(t *testing.T) {
	want := soakRun()
	dir := t.TempDir()
	for name, v := range map[string]any{"metadata.json": want.Metadata, SoakFile: want.Soak} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run, err := LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Soak) != 1 || len(run.Soak[0].Series) != 5 {
		t.Fatalf("loaded %d soaks, want one of 5 series", len(run.Soak))
	}
	d := parse(t, render(t, run))
	if d.byID("soak") == nil {
		t.Fatal("no soak section")
	}
	tab := d.byID("soak-0-table")
	if tab == nil {
		t.Fatal("no soak table")
	}
	rows := elements(tab, "tr")
	if len(rows) != 6 {
		t.Fatalf("%d rows, want a header and 5 series", len(rows))
	}
	if got := text(rows[2]); !strings.Contains(got, "b/gw gateway RSS") || !strings.Contains(got, "outside band") {
		t.Errorf("row of the growing series: %q", got)
	}
	if got := text(rows[1]); !strings.Contains(got, "pass") || !strings.Contains(got, "band") {
		t.Errorf("row of a flat series: %q", got)
	}
	// One plot per unit: RSS, fds, goroutines, latency.
	for i := range 4 {
		fig := d.byID("soak-0-plot-" + strconv.Itoa(i))
		if fig == nil {
			t.Fatalf("no plot %d", i)
		}
		if n := len(elements(fig, "path")); n < 10 {
			t.Errorf("plot %d: %d paths, want drawn lines", i, n)
		}
	}
	if d.byID("soak-0-plot-4") != nil {
		t.Error("a fifth plot for four units")
	}
	heading := d.find(func(n *xhtml.Node) bool { return n.Data == "h3" && attr(n, "id") == "soak-0" })
	if len(heading) != 1 || !strings.Contains(text(heading[0]), "FAIL") {
		t.Errorf("soak heading does not say FAIL")
	}
}

// TestSoakChromium opens the soak page in a real browser: the plots must
// be SVG in the DOM it builds.
func TestSoakChromium(t *testing.T) {
	bin := chromium(t)
	page := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(page, render(t, soakRun()), 0o644); err != nil {
		t.Fatal(err)
	}
	d := parse(t, runChromium(t, bin, "--dump-dom", "file://"+page))
	for i := range 4 {
		fig := d.byID("soak-0-plot-" + strconv.Itoa(i))
		if fig == nil {
			t.Fatalf("browser DOM lacks soak plot %d", i)
		}
		if svgs := elements(fig, "svg"); len(svgs) != 1 || svgs[0].Namespace != "svg" {
			t.Errorf("soak plot %d: not one SVG element in the browser's DOM", i)
		}
	}
}

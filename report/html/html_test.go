package html

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	xhtml "golang.org/x/net/html"

	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

// seed000 is the shape of seed 000's full matrix: the scenarios of its
// Table IV and the workloads and payloads of its Table V.
var (
	seed000Scenarios = []string{"lcl", "edg2.5", "edg5", "edg10", "edg15", "edg20"}
	seed000Payloads  = map[string][]int{
		"echo":   {60, 1000, 2000, 10000, 100000, 1000000},
		"recv":   {60, 1000, 2000, 10000, 100000, 1000000},
		"static": {0},
	}
	seed000Workloads = []string{"echo", "recv", "static"}
)

// syntheticRun makes a run whose response times grow with the scenario's
// delay and the payload, strait a little slower than direct, log-normally
// spread, with a few failed requests. static's edg20 strait cell is made
// to miss its 100 ms KPI.
func syntheticRun(n int, scenarios []string, workloads []string, payloads map[string][]int) Run {
	r := rand.New(rand.NewPCG(1, 2))
	run := Run{
		Dir:       "synthetic",
		Scenarios: scenarios,
		Metadata: Metadata{
			Experiment: "synthetic",
			Started:    time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
			Finished:   time.Date(2026, 11, 22, 11, 0, 0, 0, time.UTC),
			Host:       map[string]string{"kernel": "Linux 6.1 x86_64", "cpu": "Test CPU", "cpus": "2", "go": "go1.26"},
			Strait:     "test",
			Emulation:  "userspace",
			TCPCC:      map[string]string{"a/server": "cubic", "b/client": "bbr"},
			Tools:      map[string]string{"direct": "kernel routing", "strait": "strait test"},
			Load:       map[string]any{"Requests": 400, "Threads": 1, "KeepAlive": true},
		},
	}
	for _, sc := range scenarios {
		run.Metadata.Scenarios = append(run.Metadata.Scenarios, ScenarioInfo{Name: sc, LAN: "delay for " + sc, WAN: "delay for " + sc})
	}
	for si, sc := range scenarios {
		for _, w := range workloads {
			for _, p := range payloads[w] {
				for _, tool := range []string{"direct", "strait"} {
					base := 0.2 + 4*float64(si) + float64(p)/20000
					if tool == "strait" {
						base *= 1.2
					}
					if w == "static" && tool == "strait" && sc == scenarios[len(scenarios)-1] {
						base = 150
					}
					c := Cell{Scenario: sc, Tool: tool, Workload: w, Payload: p}
					for i := range n {
						ms := base * math.Exp(0.15*r.NormFloat64())
						start := run.Metadata.Started.Add(time.Duration(len(run.Cells)*n+i) * time.Second)
						s := load.Sample{Thread: 1, Seq: i + 1, Start: start, Total: time.Duration(ms*1000) * time.Microsecond, Status: 200}
						if i%97 == 13 {
							s.Err, s.Status = "response timeout", 0
						}
						c.Samples = append(c.Samples, s)
					}
					run.Cells = append(run.Cells, c)
				}
			}
		}
	}
	return run
}

func render(t testing.TB, run Run) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, run); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// dom is a parsed report with lookups by id and class.
type dom struct{ root *xhtml.Node }

func parse(t testing.TB, b []byte) dom {
	t.Helper()
	root, err := xhtml.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return dom{root}
}

func attr(n *xhtml.Node, key string) string {
	for _, a := range n.Attr {
		if strings.EqualFold(a.Key, key) {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *xhtml.Node, class string) bool {
	return slices.Contains(strings.Fields(attr(n, "class")), class)
}

func (p dom) find(pred func(*xhtml.Node) bool) []*xhtml.Node {
	var out []*xhtml.Node
	for n := range p.root.Descendants() {
		if n.Type == xhtml.ElementNode && pred(n) {
			out = append(out, n)
		}
	}
	return out
}

func (p dom) byID(id string) *xhtml.Node {
	ns := p.find(func(n *xhtml.Node) bool { return attr(n, "id") == id })
	if len(ns) != 1 {
		return nil
	}
	return ns[0]
}

func elements(n *xhtml.Node, tag string) []*xhtml.Node {
	var out []*xhtml.Node
	for d := range n.Descendants() {
		if d.Type == xhtml.ElementNode && d.Data == tag {
			out = append(out, d)
		}
	}
	return out
}

func text(n *xhtml.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == xhtml.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.TrimSpace(b.String())
}

// TestWriteSeed000Matrix renders seed 000's full matrix and checks the
// dom's structure: one box plot per workload and payload, one payload plot
// per workload with several payloads and scenario, Table 3 and the ratio
// table with a cell per scenario, payload and tool, every cell in the
// statistics table, the KPI flags, and nothing fetched from anywhere.
func TestWriteSeed000Matrix(t *testing.T) {
	run := syntheticRun(400, seed000Scenarios, seed000Workloads, seed000Payloads)
	b := render(t, run)
	p := parse(t, b)

	boxes := p.find(func(n *xhtml.Node) bool { return n.Data == "figure" && hasClass(n, "boxplot") })
	if len(boxes) != 13 {
		t.Errorf("%d box plots, want 13 (6 echo + 6 recv + 1 static payloads)", len(boxes))
	}
	for _, w := range seed000Workloads {
		for _, pl := range seed000Payloads[w] {
			fig := p.byID(fmt.Sprintf("box-%s-%s", w, report.FormatSize(pl)))
			if fig == nil {
				t.Errorf("no box plot for %s %s", w, report.FormatSize(pl))
				continue
			}
			svgs := elements(fig, "svg")
			if len(svgs) != 1 || attr(svgs[0], "viewbox") == "" {
				t.Errorf("box plot %s %s: %d svg elements with viewBox %q", w, report.FormatSize(pl), len(svgs), attr(svgs[0], "viewbox"))
			}
			// Every scenario is a tick label; the legend names both tools
			// and the KPI; the axis says its unit.
			txt := text(fig)
			for _, want := range append(slices.Clone(seed000Scenarios), "direct", "strait", "response time (ms)") {
				if !strings.Contains(txt, want) {
					t.Errorf("box plot %s %s: no text %q", w, report.FormatSize(pl), want)
				}
			}
			kpi := map[string]string{"echo": "KPI 1000 ms", "recv": "KPI 1000 ms", "static": "KPI 100 ms"}[w]
			if !strings.Contains(txt, kpi) {
				t.Errorf("box plot %s %s: no %q in the legend", w, report.FormatSize(pl), kpi)
			}
		}
	}
	payloadPlots := p.find(func(n *xhtml.Node) bool { return n.Data == "figure" && hasClass(n, "payloadplot") })
	if len(payloadPlots) != 12 {
		t.Errorf("%d payload plots, want 12 (echo and recv × 6 scenarios)", len(payloadPlots))
	}
	if n := len(p.find(func(n *xhtml.Node) bool { return n.Data == "svg" })); n != 25 {
		t.Errorf("%d svg elements, want 25", n)
	}

	for _, w := range seed000Workloads {
		tab := p.byID("table3-" + w)
		if tab == nil {
			t.Fatalf("no Table 3 for %s", w)
		}
		rows := elements(tab, "tr")
		if len(rows) != 2+len(seed000Scenarios) {
			t.Errorf("table3-%s: %d rows, want 2 header rows + %d scenarios", w, len(rows), len(seed000Scenarios))
		}
		for i, sc := range seed000Scenarios {
			row := rows[2+i]
			if h := elements(row, "th"); len(h) != 1 || text(h[0]) != sc {
				t.Errorf("table3-%s row %d: want scenario %s first", w, i, sc)
			}
			tds := elements(row, "td")
			if len(tds) != 2*len(seed000Payloads[w]) {
				t.Fatalf("table3-%s %s: %d cells, want %d", w, sc, len(tds), 2*len(seed000Payloads[w]))
			}
			// The first cell is direct's IQR mean at the smallest payload.
			want := report.Summarize(cellOf(run, sc, "direct", w, seed000Payloads[w][0]).Samples).IQRMeanMS
			if got := text(tds[0]); got != strconv.FormatFloat(want, 'f', 3, 64) {
				t.Errorf("table3-%s %s direct: %s, want %.3f", w, sc, got, want)
			}
		}
		ratio := p.byID("ratio-" + w)
		if ratio == nil {
			t.Fatalf("no ratio table for %s", w)
		}
		cells := elements(ratio, "td")
		if len(cells) != len(seed000Scenarios)*len(seed000Payloads[w]) {
			t.Errorf("ratio-%s: %d cells", w, len(cells))
		}
		// strait is 1.2× direct by construction: about 95 % of the
		// intervals must contain 1.2, and all be near it.
		re := regexp.MustCompile(`^([0-9.]+)× \[([0-9.]+), ([0-9.]+)\]$`)
		hit := 0
		for _, c := range cells {
			m := re.FindStringSubmatch(text(c))
			if m == nil {
				t.Errorf("ratio-%s: cell %q, want \"r× [lo, hi]\"", w, text(c))
				continue
			}
			lo, _ := strconv.ParseFloat(m[2], 64)
			hi, _ := strconv.ParseFloat(m[3], 64)
			if lo < 1.2 && 1.2 < hi {
				hit++
			}
			if w != "static" && (lo < 1.1 || hi > 1.3) {
				t.Errorf("ratio-%s: %s is far from 1.2", w, text(c))
			}
		}
		if w != "static" && float64(hit) < 0.8*float64(len(cells)) {
			t.Errorf("ratio-%s: %d of %d intervals contain 1.2", w, hit, len(cells))
		}
	}

	statRows := p.find(func(n *xhtml.Node) bool { return n.Data == "tr" && hasClass(n, "cell") })
	if len(statRows) != len(run.Cells) {
		t.Errorf("statistics table: %d rows, want %d", len(statRows), len(run.Cells))
	}
	var over []string
	for _, r := range statRows {
		if hasClass(r, "over") {
			tds := elements(r, "td")
			over = append(over, text(tds[0])+" "+text(tds[3]))
		}
	}
	if want := []string{"edg20 strait"}; !slices.Equal(over, want) {
		t.Errorf("rows flagged over the KPI: %q, want %q", over, want)
	}
	flagged := p.find(func(n *xhtml.Node) bool { return n.Data == "td" && hasClass(n, "over") })
	if len(flagged) != 1 {
		t.Errorf("%d Table 3 cells flagged over the KPI, want 1", len(flagged))
	}

	// Self-contained: no scripts, no stylesheets or images by reference.
	for _, bad := range []string{"<script", "<link", "<img", "<iframe", "@import", "url("} {
		if bytes.Contains(b, []byte(bad)) {
			t.Errorf("dom contains %q", bad)
		}
	}
	for _, n := range p.find(func(n *xhtml.Node) bool { return attr(n, "src") != "" || strings.Contains(attr(n, "href"), ":") }) {
		t.Errorf("<%s> refers outside the dom: %v", n.Data, n.Attr)
	}
	for _, want := range []string{"Linux 6.1 x86_64", "Test CPU", "userspace", "bbr", "strait test", "Requests 400"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("metadata %q missing", want)
		}
	}
}

func cellOf(run Run, sc, tool, w string, p int) Cell {
	for _, c := range run.Cells {
		if c.Scenario == sc && c.Tool == tool && c.Workload == w && c.Payload == p {
			return c
		}
	}
	panic("no cell")
}

// TestWriteDeterministic: the same run gives the same dom (but for the
// time it was generated), so reports can be diffed.
func TestWriteDeterministic(t *testing.T) {
	run := syntheticRun(50, []string{"lcl", "edg10"}, []string{"echo"}, map[string][]int{"echo": {60, 1000}})
	strip := regexp.MustCompile(`Report generated [^.]*\.`)
	a := strip.ReplaceAll(render(t, run), nil)
	b := strip.ReplaceAll(render(t, run), nil)
	if !bytes.Equal(a, b) {
		t.Error("two renderings of one run differ")
	}
}

func TestWriteEdgeCases(t *testing.T) {
	tests := []struct {
		name  string
		run   func() Run
		check func(t *testing.T, p dom, b []byte)
	}{
		{name: "direct only: no ratio table",
			run: func() Run {
				r := syntheticRun(30, []string{"lcl"}, []string{"echo"}, map[string][]int{"echo": {60}})
				r.Cells = slices.DeleteFunc(r.Cells, func(c Cell) bool { return c.Tool != "direct" })
				return r
			},
			check: func(t *testing.T, p dom, _ []byte) {
				if p.byID("ratio-echo") != nil {
					t.Error("ratio table without a tool to compare")
				}
				if p.byID("box-echo-60B") == nil {
					t.Error("no box plot")
				}
			}},
		{name: "every request failed",
			run: func() Run {
				r := syntheticRun(30, []string{"lcl"}, []string{"echo"}, map[string][]int{"echo": {60}})
				for i := range r.Cells[1].Samples {
					r.Cells[1].Samples[i].Err = "connect timeout"
				}
				return r
			},
			check: func(t *testing.T, _ dom, b []byte) {
				if !bytes.Contains(b, []byte("no successful request")) {
					t.Error("failed cell not marked")
				}
			}},
		{name: "no KPI for hello, unknown scenario order",
			run: func() Run {
				r := syntheticRun(30, []string{"x", "y"}, []string{"hello"}, map[string][]int{"hello": {0}})
				r.Scenarios = nil
				return r
			},
			check: func(t *testing.T, p dom, _ []byte) {
				fig := p.byID("box-hello-0B")
				if fig == nil {
					t.Fatal("no box plot")
				}
				if strings.Contains(text(fig), "KPI") {
					t.Error("KPI line for a workload without KPI")
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := render(t, tt.run())
			tt.check(t, parse(t, b), b)
		})
	}
	if err := Write(&bytes.Buffer{}, Run{}); err == nil {
		t.Error("empty run: no error")
	}
	if err := Write(&bytes.Buffer{}, Run{Cells: []Cell{{}}, Bootstrap: report.Bootstrap{Level: 2}}); err == nil {
		t.Error("bootstrap level 2: no error")
	}
}

// writeRunDir writes run as the lab runner does: requests.csv with the
// cell columns in front of load's, and metadata.json.
func writeRunDir(t testing.TB, run Run) string {
	t.Helper()
	dir := t.TempDir()
	var out bytes.Buffer
	out.WriteString("scenario,tool,workload,payload_bytes,repetition," + strings.Join(load.Columns, ",") + "\n")
	for _, c := range run.Cells {
		var buf bytes.Buffer
		if err := load.WriteCSV(&buf, c.Samples); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")[1:]
		for _, l := range lines {
			fmt.Fprintf(&out, "%s,%s,%s,%d,1,%s\n", c.Scenario, c.Tool, c.Workload, c.Payload, l)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "requests.csv"), out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	md, err := json.Marshal(run.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metadata.json"), md, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadRun(t *testing.T) {
	want := syntheticRun(20, []string{"edg10", "lcl"}, []string{"echo", "static"}, map[string][]int{"echo": {60, 1000}, "static": {0}})
	dir := writeRunDir(t, want)
	got, err := LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Scenarios, []string{"edg10", "lcl"}) {
		t.Errorf("scenarios %v, want the metadata's order", got.Scenarios)
	}
	if got.Metadata.Host["kernel"] != "Linux 6.1 x86_64" || got.Metadata.Emulation != "userspace" {
		t.Errorf("metadata %+v", got.Metadata)
	}
	if len(got.Cells) != len(want.Cells) {
		t.Fatalf("%d cells, want %d", len(got.Cells), len(want.Cells))
	}
	for i := range want.Cells {
		w, g := want.Cells[i], got.Cells[i]
		if w.Scenario != g.Scenario || w.Tool != g.Tool || w.Workload != g.Workload || w.Payload != g.Payload || len(w.Samples) != len(g.Samples) {
			t.Fatalf("cell %d: %v %v %v %v n=%d, want %v %v %v %v n=%d", i, g.Scenario, g.Tool, g.Workload, g.Payload, len(g.Samples), w.Scenario, w.Tool, w.Workload, w.Payload, len(w.Samples))
		}
		for j := range w.Samples {
			if w.Samples[j].Total != g.Samples[j].Total || w.Samples[j].Err != g.Samples[j].Err {
				t.Fatalf("cell %d sample %d: %+v, want %+v", i, j, g.Samples[j], w.Samples[j])
			}
		}
	}
}

func TestLoadRunErrors(t *testing.T) {
	good := syntheticRun(3, []string{"lcl"}, []string{"echo"}, map[string][]int{"echo": {60}})
	tests := []struct {
		name    string
		setup   func(dir string)
		wantErr string
	}{
		{"no metadata.json", func(dir string) { os.Remove(filepath.Join(dir, "metadata.json")) }, "metadata.json: no such file"},
		{"corrupt metadata.json", func(dir string) { os.WriteFile(filepath.Join(dir, "metadata.json"), []byte(`{"host": [`), 0o644) }, "metadata.json: unexpected end of JSON"},
		{"no requests.csv", func(dir string) { os.Remove(filepath.Join(dir, "requests.csv")) }, "requests.csv: no such file"},
		{"empty requests.csv", func(dir string) { os.WriteFile(filepath.Join(dir, "requests.csv"), nil, 0o644) }, "no header row"},
		{"header only", func(dir string) {
			replaceCSV(t, dir, func(s string) string { return strings.SplitN(s, "\n", 2)[0] + "\n" })
		}, "no requests"},
		{"no tool column", func(dir string) {
			replaceCSV(t, dir, func(s string) string { return strings.Replace(s, "scenario,tool,", "scenario,tol,", 1) })
		}, `missing column "tool"`},
		{"bad payload", func(dir string) {
			replaceCSV(t, dir, func(s string) string { return strings.Replace(s, "lcl,direct,echo,60,", "lcl,direct,echo,sixty,", 1) })
		}, `line 2: payload_bytes "sixty"`},
		{"bad total", func(dir string) {
			replaceCSV(t, dir, func(s string) string {
				l := strings.Split(s, "\n")
				f := strings.Split(l[1], ",")
				f[10] = "x"
				l[1] = strings.Join(f, ",")
				return strings.Join(l, "\n")
			})
		}, `line 2: total_us "x": not an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeRunDir(t, good)
			tt.setup(dir)
			_, err := LoadRun(dir)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	if _, err := LoadRun(filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "a run directory holds") {
		t.Errorf("missing directory: %v", err)
	}
}

func replaceCSV(t testing.TB, dir string, f func(string) string) {
	path := filepath.Join(dir, "requests.csv")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(f(string(b))), 0o644); err != nil {
		t.Fatal(err)
	}
}

// realRunDir is a run directory written by `strait lab run`: $STRAIT_RUN_DIR,
// or the newest finished one under /tmp/qs-results (where the lab's
// quickstart is usually run), or "" when there is none.
func realRunDir() string {
	if d := os.Getenv("STRAIT_RUN_DIR"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/tmp/qs-results/*/metadata.json")
	if len(dirs) == 0 {
		return ""
	}
	slices.Sort(dirs)
	return filepath.Dir(dirs[len(dirs)-1])
}

// TestWriteRealRun renders a run directory the lab wrote, checking what
// its summary.json says against the dom.
func TestWriteRealRun(t *testing.T) {
	dir := realRunDir()
	if dir == "" {
		t.Skip("no run directory: set STRAIT_RUN_DIR or run `strait lab run quickstart --out /tmp/qs-results`")
	}
	run, err := LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := parse(t, render(t, run))
	var summary []struct {
		Scenario, Tool, Workload string
		Payload                  int
		report.Summary
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &summary); err != nil {
		t.Fatal(err)
	}
	rows := p.find(func(n *xhtml.Node) bool { return n.Data == "tr" && hasClass(n, "cell") })
	if len(rows) != len(summary) {
		t.Fatalf("%s: %d rows in the statistics table, summary.json has %d cells", dir, len(rows), len(summary))
	}
	// Every IQR mean of summary.json appears in its workload's Table 3.
	for _, s := range summary {
		if s.OK == 0 {
			continue
		}
		tab := p.byID("table3-" + s.Workload)
		if tab == nil || !strings.Contains(text(tab), strconv.FormatFloat(s.IQRMeanMS, 'f', 3, 64)) {
			t.Errorf("%s: IQR mean %.3f of %s/%s/%s/%d not in Table 3", dir, s.IQRMeanMS, s.Scenario, s.Tool, s.Workload, s.Payload)
		}
		if p.byID(fmt.Sprintf("box-%s-%s", s.Workload, report.FormatSize(s.Payload))) == nil {
			t.Errorf("%s: no box plot for %s %s", dir, s.Workload, report.FormatSize(s.Payload))
		}
	}
	t.Logf("rendered %s: %d cells", dir, len(summary))
}

// BenchmarkWriteSeed000 renders seed 000's full matrix as the brief sizes
// it: 3 workloads × 6 payloads × 6 scenarios × 2 tools × 400 requests.
func BenchmarkWriteSeed000(b *testing.B) {
	payloads := map[string][]int{"echo": seed000Payloads["echo"], "recv": seed000Payloads["recv"], "static": seed000Payloads["echo"]}
	run := syntheticRun(400, seed000Scenarios, seed000Workloads, payloads)
	for b.Loop() {
		var buf bytes.Buffer
		if err := Write(&buf, run); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(buf.Len())/1e6, "MB/page")
	}
}

// FuzzReadRequests: requests.csv is read from disk, so any bytes must give
// cells or an error, never a panic, and no request may be lost.
func FuzzReadRequests(f *testing.F) {
	f.Add([]byte("scenario,tool,workload,payload_bytes,repetition," + strings.Join(load.Columns, ",") + "\n" +
		"lcl,direct,echo,60,1,1,1,1795371196665895,0,74,77,200,187,176,\n" +
		"lcl,strait,echo,60,1,1,1,1795371196665895,0,74,77,0,187,176,timeout\n"))
	f.Add([]byte("scenario,tool,workload,payload_bytes\n"))
	f.Add([]byte("a,b\n\"x"))
	// Edges: nothing, payloads and repetitions past int and negative,
	// invalid UTF-8 names, a row cut short.
	head := "scenario,tool,workload,payload_bytes,repetition," + strings.Join(load.Columns, ",") + "\n"
	f.Add([]byte{})
	f.Add([]byte(head + "lcl,direct,echo,99999999999999999999,18446744073709551616,1,1,1795371196665895,0,74,77,200,187,176,\n"))
	f.Add([]byte(head + "lcl,direct,echo,-60,-1,-1,-1,-1795371196665895,-1,-74,-77,-200,-187,-176,\n"))
	f.Add([]byte(head + "\xff\xfe,\xc3,echo,60,1,1,1,1795371196665895,0,74,77,200,187,176,\xff\n"))
	f.Add([]byte(head + "lcl,direct,echo,60,1,1,1,17953"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "requests.csv")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		cells, err := readRequests(path)
		if err != nil {
			return
		}
		samples, err := load.ReadCSV(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("readRequests accepted what load.ReadCSV rejects: %v", err)
		}
		n := 0
		for _, c := range cells {
			if c.Scenario == "" || c.Tool == "" || c.Workload == "" || c.Payload < 0 {
				t.Fatalf("bad cell %+v", c)
			}
			n += len(c.Samples)
		}
		if n != len(samples) {
			t.Fatalf("%d samples in cells, %d in the file", n, len(samples))
		}
	})
}

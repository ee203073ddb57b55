package run_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	xhtml "golang.org/x/net/html"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/run"
	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

// reducedBuiltin writes a built-in experiment with its lines replaced
// (old → new, each must occur) and its topology path made absolute.
func reducedBuiltin(t *testing.T, name string, edits ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("builtin", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	topo, err := filepath.Abs(filepath.Join("builtin", "two-clusters-topology.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	edits = append(edits, "topology: two-clusters-topology.yaml", "topology: "+topo)
	for i := 0; i < len(edits); i += 2 {
		if !strings.Contains(s, edits[i]) {
			t.Fatalf("builtin %s has no %q to reduce", name, edits[i])
		}
		s = strings.Replace(s, edits[i], edits[i+1], 1)
	}
	path := filepath.Join(t.TempDir(), name+"-reduced.yaml")
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runReduced runs an experiment file with the strait binary and returns
// the run directory.
func runReduced(t *testing.T, file string) (string, []byte) {
	t.Helper()
	bin := testenv.StraitBinary(t)
	state, out := t.TempDir(), t.TempDir()
	t.Cleanup(func() { downLabsIn(state) })
	cmd := exec.Command(bin, "lab", "run", file, "--out", out)
	cmd.Env = append(os.Environ(), lab.StateDirEnv+"="+state)
	stdout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("strait lab run %s: %v\n%s", file, err, stdout)
	}
	dirs, _ := filepath.Glob(filepath.Join(out, "*", "metadata.json"))
	if len(dirs) != 1 {
		t.Fatalf("%d run directories in %s", len(dirs), out)
	}
	return filepath.Dir(dirs[0]), stdout
}

// openReport opens a run's report.html in headless Chromium and checks
// that every named table has data rows and every figure a drawn plot.
func openReport(t *testing.T, dir string, tables ...string) {
	t.Helper()
	bin := testenv.Chromium(t)
	dom := testenv.RunChromium(t, bin, "--dump-dom", "file://"+filepath.Join(dir, "report.html"))
	doc, err := xhtml.Parse(bytes.NewReader(dom))
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*xhtml.Node{}
	var figures []*xhtml.Node
	var walk func(*xhtml.Node)
	walk = func(n *xhtml.Node) {
		if n.Type == xhtml.ElementNode {
			for _, a := range n.Attr {
				if a.Key == "id" {
					byID[a.Val] = n
				}
			}
			if n.Data == "figure" {
				figures = append(figures, n)
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	count := func(n *xhtml.Node, tag string) int {
		k := 0
		var w func(*xhtml.Node)
		w = func(n *xhtml.Node) {
			if n.Type == xhtml.ElementNode && n.Data == tag {
				k++
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				w(c)
			}
		}
		w(n)
		return k
	}
	for _, id := range tables {
		tab := byID[id]
		if tab == nil {
			t.Errorf("report: no table %s", id)
			continue
		}
		if rows, cells := count(tab, "tr"), count(tab, "td"); rows < 2 || cells < rows-1 {
			t.Errorf("report: table %s has %d rows, %d cells: not filled", id, rows, cells)
		}
	}
	if len(figures) == 0 {
		t.Error("report: no figure")
	}
	for _, f := range figures {
		if count(f, "svg") != 1 || count(f, "path") < 10 {
			t.Errorf("report: a figure without a drawn plot (%d svg, %d paths)", count(f, "svg"), count(f, "path"))
		}
	}
}

// TestSeed004Reduced runs seed004 on its 1 Gbit/s MTU 9000 link with 4
// trials of 0.5 s: every tool carries TCP and UDP, strait's two modes
// show ICMP as not carried, kernel tools' CPU reads "kernel", the
// userspace tools' processes were measured, and the tunnels fit the
// 9000-byte link.
func TestSeed004Reduced(t *testing.T) {
	testenv.RequireRoot(t)
	file := reducedBuiltin(t, "seed004",
		"scenarios: [1g-1500, 1g-9000, 10g-1500, 10g-9000, unshaped-1500, unshaped-9000]", "scenarios: [1g-9000]",
		"trials: 50", "trials: 4",
		"ping: {count: 50, interval: 10ms}", "ping: {count: 10, interval: 10ms}")
	dir, stdout := runReduced(t, file)
	var cells []report.IperfSummary
	readJSON(t, filepath.Join(dir, "iperf3.json"), &cells)
	if len(cells) != 5*3 {
		t.Fatalf("%d iperf3 cells, want 5 tools × 3 protocols\n%s", len(cells), stdout)
	}
	for _, c := range cells {
		straitMode := c.Tool == "strait" || c.Tool == "strait-packet"
		carried := !straitMode || c.Protocol != "icmp"
		if c.Carried != carried {
			t.Errorf("%+v: carried %v, want %v", c.IperfCell, c.Carried, carried)
			continue
		}
		if !carried {
			if len(c.Trials) != 0 || c.Mean != 0 {
				t.Errorf("%+v: not carried but has values", c.IperfCell)
			}
			continue
		}
		want := 4
		if c.Protocol == "icmp" {
			want = 10
		}
		if len(c.Trials) != want || !(c.Mean > 0) || c.Usage == nil {
			t.Errorf("%+v: %d trials, mean %v, usage %v; want %d trials, a mean and usage", c.IperfCell, len(c.Trials), c.Mean, c.Usage, want)
			continue
		}
		kernel := c.Tool == "direct" || c.Tool == "vxlan"
		if c.Usage.Kernel != kernel || !kernel && (c.Usage.CPUSeconds == nil || c.Usage.PeakRSSBytes == nil || *c.Usage.PeakRSSBytes <= 0) {
			t.Errorf("%+v: usage %+v; want kernel=%v, else CPU and peak RSS read", c.IperfCell, c.Usage, kernel)
		}
		// A TCP transfer of 1.5 s at up to 1 Gbit/s costs a userspace
		// tunnel or proxy far more than one 10 ms tick. strait-packet's
		// gateways only steer: its packets cross the kernel's programs.
		if c.Protocol == "tcp" && !kernel && c.Tool != "strait-packet" && *c.Usage.CPUSeconds <= 0 {
			t.Errorf("%+v: no CPU time measured for a TCP transfer", c.IperfCell)
		}
	}
	if !bytes.Contains(stdout, []byte("not carried")) {
		t.Errorf("table without a not-carried row:\n%s", stdout)
	}
	var md run.Metadata
	readJSON(t, filepath.Join(dir, "metadata.json"), &md)
	if !strings.Contains(md.Tools["vxlan"], "MTU 8950") || md.ToolUsage["strait"] == nil || !md.ToolUsage["direct"].Kernel {
		t.Errorf("metadata: vxlan %q (want MTU 8950 on the 9000-byte link), tool usage %+v", md.Tools["vxlan"], md.ToolUsage)
	}
	openReport(t, dir, "iperf-table", "tool-usage", "usage-table")
}

// TestSeed002Reduced runs seed002 with 1 s stream cells and 1 s rate
// cells: every tool's (strait's in each of its data-plane modes) streams (at lcl only) and rate cells (at lcl and
// cloud10) are measured, the rate cells at cloud10 over the connections
// its round trip needs (200, not the experiment's 100), strait's and
// envoy's CPU per GB and per 10 000 requests are read, and the report
// shows seed 002's published figures beside ours.
func TestSeed002Reduced(t *testing.T) {
	testenv.RequireRoot(t)
	file := reducedBuiltin(t, "seed002",
		"repetitions: 3", "repetitions: 1",
		"throughput: {streams: [1, 4, 8], duration: 10s, scenarios: [lcl]}", "throughput: {streams: [1, 8], duration: 1s, scenarios: [lcl]}",
		"  duration: 10s\n  warmup: 2s", "  duration: 1s\n  warmup: 500ms")
	dir, stdout := runReduced(t, file)
	var tput []report.ThroughputSummary
	readJSON(t, filepath.Join(dir, "throughput.json"), &tput)
	var rate []report.RateSummary
	readJSON(t, filepath.Join(dir, "rate.json"), &rate)
	if len(tput) != 7*2 || len(rate) != 7*2 {
		t.Fatalf("%d stream cells (want 14: 7 tools × 2 at lcl), %d rate cells (want 14: 7 tools × lcl, cloud10)\n%s", len(tput), len(rate), stdout)
	}
	for _, c := range tput {
		kernel := c.Tool == "direct" || c.Tool == "vxlan"
		if c.Scenario != "lcl" || c.Usage == nil || c.Usage.Kernel != kernel || !kernel && c.Usage.CPUPerGB == nil || !(c.MeanGbps > 0) {
			t.Errorf("stream %+v: %v Gbit/s, usage %+v", c.ThroughputCell, c.MeanGbps, c.Usage)
		}
	}
	conns := map[string]int{"lcl": 100, "cloud10": 200}
	for _, c := range rate {
		kernel := c.Tool == "direct" || c.Tool == "vxlan"
		if c.Count == 0 || c.Usage == nil || c.Usage.Kernel != kernel || !kernel && c.Usage.CPUPer10kRequests == nil {
			t.Errorf("rate %+v: %d requests, usage %+v", c.RateCell, c.Count, c.Usage)
		}
		if c.Connections != conns[c.Scenario] {
			t.Errorf("rate %+v: %d connections, want %d", c.RateCell, c.Connections, conns[c.Scenario])
		}
	}
	// The load generator itself reports the connections it opened.
	var raw load.RateResult
	readJSON(t, filepath.Join(dir, "raw", "cloud10-strait-rate-echo-1KB-10000rps-r1.json"), &raw)
	if raw.Connections != 200 {
		t.Errorf("cloud10 strait: the load generator opened %d connections, want 200", raw.Connections)
	}
	for _, want := range []string{"cloud10's round trip is 10ms: 10000 requests/s run over 200 connections, not 100", "rate/s  conns  tool"} {
		if !bytes.Contains(stdout, []byte(want)) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	var md run.Metadata
	readJSON(t, filepath.Join(dir, "metadata.json"), &md)
	if md.Reference == nil || len(md.Reference.Figures) == 0 {
		t.Errorf("metadata without seed 002's reference figures")
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte("Not measured here.")) {
		t.Error("report does not label the published figures as another testbed's")
	}
	openReport(t, dir, "throughput-bulk", "rate-echo-1KB-10000", "reference-table", "tool-usage", "usage-table")
}

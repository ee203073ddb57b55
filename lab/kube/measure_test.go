package kube_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/internal/testenv/k8snodes"
)

// TestMeasureOnClusters takes the clusters' column of docs/lab-clusters.md
// ("Measured"): on a fresh pair with strait installed (as TestRunOnClusters
// sets it up) it runs `strait lab run` once per ';'-separated argument list
// of STRAIT_KUBE_MEASURE (e.g. "quickstart --scenarios lcl,edg10; seed000
// --scenarios edg10 --payloads 60,100KB --repetitions 8") with --clusters,
// into STRAIT_KUBE_MEASURE_OUT, and renders each run's report in headless
// Chromium. Every run must complete and leave nothing behind. Not in make
// test: each run takes minutes of both cores.
//
// STRAIT_KUBE_MEASURE_CLUSTERS adds lines to the clusters file (e.g.
// "sessions: keep"). While a run lasts, the gateways' sessions as `ss -tin`
// shows them on each node are sampled every half second into
// ss-<cluster>.txt beside the run directory, to follow their congestion
// control, minimum RTT and window through the run's units.
func TestMeasureOnClusters(t *testing.T) {
	runs := os.Getenv("STRAIT_KUBE_MEASURE")
	if runs == "" {
		t.Skip("set STRAIT_KUBE_MEASURE to `strait lab run` arguments (docs/lab-clusters.md, \"Measured\")")
	}
	out := os.Getenv("STRAIT_KUBE_MEASURE_OUT")
	if !filepath.IsAbs(out) {
		t.Fatalf("STRAIT_KUBE_MEASURE_OUT=%q: want the absolute path of a directory for the run directories", out)
	}
	k8snodes.Require(t)
	bin := testenv.StraitBinary(t)
	start := time.Now()
	p := upPair(t, bin)
	tmp := t.TempDir()
	deployStrait(t, p, bin, tmp)
	t.Logf("setup: %v (load %s)", time.Since(start).Round(time.Second), loadavg())
	clusters := filepath.Join(tmp, "clusters.yaml")
	extra := strings.ReplaceAll(os.Getenv("STRAIT_KUBE_MEASURE_CLUSTERS"), `\n`, "\n")
	if err := os.WriteFile(clusters, fmt.Appendf(nil, "clusters:\n  a: {kubeconfig: %s}\n  b: {kubeconfig: %s}\n%s\n", p.Kubeconfig["a"], p.Kubeconfig["b"], extra), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, args := range strings.Split(runs, ";") {
		f := strings.Fields(args)
		if len(f) == 0 {
			continue
		}
		dir := filepath.Join(out, fmt.Sprint(i))
		t0, before, segs := time.Now(), loadavg(), p.tcpCounters(t)
		stop := p.sampleSessions(t, dir)
		cmd, log := labRun(t, p, bin, tmp, append(f, "--clusters", clusters, "--out", dir)...)
		err := cmd.Wait()
		stop()
		t.Logf("strait lab run %s: %v (load %s before, %s after)\n%s", strings.Join(f, " "), time.Since(t0).Round(time.Second), before, loadavg(), log)
		// What the nodes' own sockets (the gateways' sessions, the
		// API servers) sent and resent meanwhile, and the gateways'
		// sessions as they are now: their congestion control and
		// retransmissions, to compare with the namespace lab's.
		for c, n := range p.tcpCounters(t) {
			t.Logf("node of cluster %s: TCP segments out %d, retransmitted %d during the run", c, n[0]-segs[c][0], n[1]-segs[c][1])
			t.Logf("node of cluster %s: gateway sessions:\n%s", c, testenv.Run(t, "ip", "netns", "exec", p.nodeNetns(c), "ss", "-tin", "( sport = :4443 or dport = :4443 )"))
			logs, _ := p.Kubectl(c, "", "-n", "strait-system", "logs", "deployment/strait-gateway", "-c", "gateway")
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, "congestion") {
					t.Logf("cluster %s gateway: %s", c, l)
				}
			}
		}
		if err != nil {
			t.Errorf("strait lab run %s: %v", strings.Join(f, " "), err)
			continue
		}
		reports, _ := filepath.Glob(filepath.Join(dir, "*", "report.html"))
		if len(reports) != 1 {
			t.Errorf("run %s: reports %v, want one", strings.Join(f, " "), reports)
			continue
		}
		t.Run("Report", func(t *testing.T) {
			dom := string(testenv.RunChromium(t, testenv.Chromium(t), "--dump-dom", "file://"+reports[0]))
			// f[0] is a catalog name or an experiment file named
			// after its experiment (examples/experiments).
			name := strings.TrimSuffix(filepath.Base(f[0]), ".yaml")
			for _, want := range []string{"strait lab report: " + name, "<svg", `id="clusters"`} {
				if !strings.Contains(dom, want) {
					t.Errorf("the rendered report of %s has no %q", reports[0], want)
				}
			}
		})
		if left := p.leftovers(t); left != "" {
			t.Errorf("left after strait lab run %s: %s", strings.Join(f, " "), left)
		}
	}
}

// tcpCounters reads each node's TCP OutSegs and RetransSegs
// (/proc/net/snmp of its network namespace).
func (p *pair) tcpCounters(t *testing.T) map[string][2]int64 {
	t.Helper()
	out := map[string][2]int64{}
	for _, c := range []string{"a", "b"} {
		var names, values []string
		for _, l := range strings.Split(testenv.Run(t, "ip", "netns", "exec", p.nodeNetns(c), "cat", "/proc/net/snmp"), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Tcp:" {
				if names == nil {
					names = f
				} else {
					values = f
				}
			}
		}
		var n [2]int64
		for i := range min(len(names), len(values)) {
			switch names[i] {
			case "OutSegs":
				n[0], _ = strconv.ParseInt(values[i], 10, 64)
			case "RetransSegs":
				n[1], _ = strconv.ParseInt(values[i], 10, 64)
			}
		}
		out[c] = n
	}
	return out
}

// sampleSessions writes, every half second until stop is called, each
// node's gateway sessions (`ss -tin` on port 4443, with the time) to
// ss-<cluster>.txt in dir.
func (p *pair) sampleSessions(t *testing.T, dir string) (stop func()) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]*os.File{}
	for _, c := range []string{"a", "b"} {
		f, err := os.Create(filepath.Join(dir, "ss-"+c+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		files[c] = f
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			for c, f := range files {
				now := time.Now()
				out, err := exec.Command("ip", "netns", "exec", p.nodeNetns(c), "ss", "-tinH", "state", "established", "( sport = :4443 or dport = :4443 )").CombinedOutput()
				fmt.Fprintf(f, "@ %d.%06d %v\n%s", now.Unix(), now.Nanosecond()/1000, err, out)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	// Stopped by the caller after its run, or at the test's end if the
	// run failed first.
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			<-finished
			for _, f := range files {
				if err := f.Close(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

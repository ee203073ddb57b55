package run_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab"
	"github.com/strait-net/strait/lab/cpulatency"
	"github.com/strait-net/strait/lab/run"
	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report"
)

// experiment writes an experiment file with an inline two-cluster topology
// under a unique lab name and returns its path and the lab name.
func experiment(t *testing.T, scenarios string, requests int, workloads string) (string, string) {
	t.Helper()
	name := testenv.UniqueName("r")
	text := `name: test
topology:
  name: ` + name + `
  clusters:
    - name: a
      nodes: [{name: gw, gateway: true}, {name: server}]
    - name: b
      nodes: [{name: gw, gateway: true}, {name: client}]
  wan:
    - between: [a, b]
scenarios: ` + scenarios + `
tools: [direct]
server: a/server
client: b/client
workloads:
` + workloads + `
load: {requests: ` + strconv.Itoa(requests) + `, threads: 1, keepalive: true}
`
	path := filepath.Join(t.TempDir(), "exp.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, name
}

func TestRunWritesEveryRequest(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	state := t.TempDir()
	out := t.TempDir()
	file, _ := experiment(t, "[lcl, edg10]", 10, `  - {name: echo, payloads: [60, 1MB]}
  - {name: static}`)
	t.Cleanup(func() { downLabsIn(state) })
	cmd := exec.Command(bin, "lab", "run", file, "--out", out)
	cmd.Env = append(os.Environ(), lab.StateDirEnv+"="+state)
	stdout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("strait lab run: %v\n%s", err, stdout)
	}
	t.Logf("%s", stdout)
	dir := runDirIn(t, out)
	cells := readCells(t, dir)
	if len(cells) != 6 {
		t.Fatalf("%d cells, want 2 scenarios × 3 (echo 60 B, echo 1 MB, static)", len(cells))
	}
	median := map[string]float64{}
	for _, c := range cells {
		if c.Count != 10 || c.Errors != 0 {
			t.Errorf("%+v: want 10 requests, no errors", c.Cell)
		}
		if c.Workload == "static" {
			median[c.Scenario] = c.MedianMS
		}
	}
	// edg10 puts 5 ms ± 1 ms on every node's egress; the client→server
	// path crosses three links each way, so a keep-alive request takes
	// 30 ms more than without impairment on average. The six hops' jitter
	// (uniform, 1.4 ms standard deviation in sum) moves the median of ten
	// requests by about 0.6 ms either way, so it was below 30 ms by chance
	// (29.8 ms once); 2 ms of margin still catches a hop left undelayed
	// (5 ms). A lower bound only: the emulator can be late on a busy
	// machine but never early.
	if median["edg10"] < 28 {
		t.Errorf("static median at edg10 = %.3f ms, want ≥ 28 ms (3 hops × 5 ms ± 1 ms each way, less chance)", median["edg10"])
	}
	f, err := os.Open(filepath.Join(dir, "requests.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	samples, err := load.ReadCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 60 {
		t.Errorf("requests.csv has %d rows, want 60", len(samples))
	}
	for _, name := range []string{"metadata.json", "table.txt", "report.html"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	if !bytes.Contains(stdout, []byte("IQR mean")) {
		t.Error("no table on stdout")
	}
	// lcl runs last (slowest first) and emulates nothing; the run's
	// backend is still the one edg10 used.
	var md run.Metadata
	readJSON(t, filepath.Join(dir, "metadata.json"), &md)
	if md.Emulation == "none" || md.Emulation == "" {
		t.Errorf("metadata emulation backend %q, want the one edg10 used", md.Emulation)
	}
	// The userspace emulator's counters stay with the unit's logs; a unit
	// that emulated nothing has none.
	if md.Emulation == "userspace" {
		b, err := os.ReadFile(filepath.Join(dir, "logs", "edg10-r1-emulator.log"))
		if err != nil || !regexp.MustCompile(`"link counters".*packets_in=[1-9]`).Match(b) {
			t.Errorf("edg10's emulator log: %v; want its link counters with packets:\n%s", err, b)
		}
		// As root it raises its session's weight (autogroup) above the
		// tools'.
		if bytes.Contains(b, []byte("normal priority")) {
			t.Errorf("the emulator did not raise its priority:\n%s", b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "lcl-r1-emulator.log")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("lcl, which emulates nothing, left an emulator log: %v", err)
	}
}

// TestKilledRunIsCleanedUp kills `strait lab run` with SIGKILL in the middle
// of a measurement and checks that `strait lab down` leaves no namespace and
// no process behind.
func TestKilledRunIsCleanedUp(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	state := t.TempDir()
	file, _ := experiment(t, "[edg10]", 100000, `  - {name: echo, payloads: [1KB]}`)
	env := append(os.Environ(), lab.StateDirEnv+"="+state)
	t.Cleanup(func() { downLabsIn(state) })
	out := t.TempDir()
	cmd := exec.Command(bin, "lab", "run", file, "--out", out)
	cmd.Env = env
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the load generator runs: the lab, the apps and the
	// emulator all exist then.
	deadline := time.Now().Add(60 * time.Second)
	for !processRunning(bin, "load", "seq") {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("load generator never started:\n%s", stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if !processRunning(bin, "app", "echo") {
		t.Fatal("the echo app died with the runner; the test would not show that down cleans up")
	}
	name := labOfFirstUnit(t, out)
	down := exec.Command(bin, "lab", "down", name)
	down.Env = env
	if out, err := down.CombinedOutput(); err != nil {
		t.Fatalf("strait lab down: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"app", "echo"}, {"load", "seq"}, {"lab", "emulate"}} {
		if processRunning(bin, args...) {
			t.Errorf("%s %v still running after down", bin, args)
		}
	}
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), lab.NetnsPrefix+name+"-") {
			t.Errorf("namespace %s left after down", e.Name())
		}
	}
}

// downLabsIn takes down the labs whose state is in dir, and no other: labs
// of parallel tests, or a user's, must survive.
func downLabsIn(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = lab.Down(context.Background(), e.Name(), lab.Options{StateDir: dir})
	}
}

// labOfFirstUnit returns the lab name of a run's first unit: the run's lab
// tag and unit index 0.
func labOfFirstUnit(t *testing.T, out string) string {
	t.Helper()
	tags, _ := filepath.Glob(filepath.Join(out, "*", "lab-tag"))
	if len(tags) != 1 {
		t.Fatalf("lab-tag files: %v", tags)
	}
	b, err := os.ReadFile(tags[0])
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b)) + "0"
}

// processRunning reports whether a live process runs bin with args (ip netns
// exec replaces itself with the command, so the command line is the
// binary's own).
func processRunning(bin string, args ...string) bool {
	entries, _ := os.ReadDir("/proc")
	want := strings.Join(append([]string{bin}, args...), "\x00")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(b), want) {
			continue
		}
		if testenv.ProcessAlive(pid) {
			return true
		}
	}
	return false
}

// TestResumeSkipsFinishedUnits kills a run after its first unit and resumes
// it: the finished unit is not measured again, the rest is, and the results
// cover both.
func TestResumeSkipsFinishedUnits(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	state := t.TempDir()
	out := t.TempDir()
	file, _ := experiment(t, "[lcl, edg5]", 5, `  - {name: echo, payloads: [1KB]}`)
	env := append(os.Environ(), lab.StateDirEnv+"="+state)
	t.Cleanup(func() { downLabsIn(state) })
	cmd := exec.Command(bin, "lab", "run", file, "--out", out)
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir string
	deadline := time.Now().Add(60 * time.Second)
	for {
		done, _ := filepath.Glob(filepath.Join(out, "test-*", "units", "edg5-r1.done")) // slowest first
		if len(done) == 1 {
			dir = filepath.Dir(filepath.Dir(done[0]))
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatal("first unit never finished")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	first := filepath.Join(dir, "raw", "edg5-direct-echo-1KB-r1.csv")
	before, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	resume := exec.Command(bin, "lab", "run", file, "--resume", dir)
	resume.Env = env
	stdout, err := resume.CombinedOutput()
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, stdout)
	}
	if !bytes.Contains(stdout, []byte("1 of 2 units already done")) {
		t.Errorf("resume did not report the finished unit:\n%s", stdout)
	}
	after, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Error("the finished unit's results were measured again")
	}
	f, err := os.Open(filepath.Join(dir, "requests.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	samples, err := load.ReadCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 2*5 { // 2 scenarios × 5 requests, direct only
		t.Errorf("requests.csv has %d rows, want 10", len(samples))
	}
	// A resume with another experiment file is refused.
	other, _ := experiment(t, "[lcl]", 5, `  - {name: echo, payloads: [1KB]}`)
	bad := exec.Command(bin, "lab", "run", other, "--resume", dir)
	bad.Env = env
	if out, err := bad.CombinedOutput(); err == nil || !bytes.Contains(out, []byte("another experiment file")) {
		t.Errorf("resume with another experiment: %v\n%s", err, out)
	}
}

// TestSeed000Reduced runs the built-in seed000 experiment cut down to one
// scenario, two payloads and two repetitions (the CI version; 40
// requests per cell as the catalog says), through direct and strait, and
// checks the results, the table and the HTML report.
func TestSeed000Reduced(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	state := t.TempDir()
	out := t.TempDir()
	t.Cleanup(func() { downLabsIn(state) })
	cmd := exec.Command(bin, "lab", "run", "seed000", "--scenarios", "edg5", "--payloads", "60,10KB",
		"--repetitions", "2", "--parallel", "2", "--out", out)
	cmd.Env = append(os.Environ(), lab.StateDirEnv+"="+state)
	stdout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("strait lab run seed000 (reduced): %v\n%s", err, stdout)
	}
	dir := runDirIn(t, out)
	cells := readCells(t, dir)
	// 2 tools × (echo 60 B, echo 10 KB, recv 60 B, recv 10 KB, static).
	if len(cells) != 10 {
		t.Fatalf("%d cells, want 10", len(cells))
	}
	for _, c := range cells {
		if c.Count != 80 || c.Errors != 0 {
			t.Errorf("%+v: %d requests, %d errors; want 80 (2 repetitions × 40), none failed", c.Cell, c.Count, c.Errors)
		}
	}
	// The table flags each cell against its workload's KPI (edg5 meets
	// them all) and gives strait's ratio to direct.
	if !bytes.Contains(stdout, []byte("vs direct")) || bytes.Count(stdout, []byte("  ok\n")) != 10 {
		t.Errorf("table without ratio column or KPI flags on every cell:\n%s", stdout)
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(page, []byte("<svg")); n < 5 {
		t.Errorf("report.html has %d SVG plots, want one per workload and payload (5) at least", n)
	}
	for _, id := range []string{"table3-echo", "table3-recv", "table3-static", "ratio-echo", "ratio-static", "cells-table",
		"box-echo-60B", "box-recv-10KB", "box-static-0B", "payload-echo-edg5"} {
		if !bytes.Contains(page, []byte(`id="`+id+`"`)) {
			t.Errorf("report.html lacks %s", id)
		}
	}
	// summary.json's intervals are the report's: same cells, same seeds.
	for _, c := range cells {
		if c.Tool != "strait" {
			continue
		}
		if c.RatioIQRMean == nil || c.RatioIQRMeanCI == nil || !c.RatioIQRMeanCI.Valid() || !c.IQRMeanCI.Valid() || !c.MedianCI.Valid() {
			t.Errorf("%+v: no ratio to direct or intervals in summary.json", c.Cell)
			continue
		}
		want := fmt.Sprintf("%.3f× <span class=\"ci\">[%.3f, %.3f]", *c.RatioIQRMean, c.RatioIQRMeanCI.Lo, c.RatioIQRMeanCI.Hi)
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("%+v: report.html lacks summary.json's ratio %s", c.Cell, want)
		}
	}
	var md run.Metadata
	readJSON(t, filepath.Join(dir, "metadata.json"), &md)
	if md.KPIs["echo"] != 1000 || md.KPIs["static"] != 100 || md.Repetitions != 2 || md.Tools["strait"] == "" || md.TCPCC["b/client"] == "" || md.Emulation == "" || md.Emulation == "none" || len(md.EmulatorSeeds) != 2 && md.Emulation == "userspace" {
		t.Errorf("metadata incomplete: %+v", md)
	}
	// Every cell has the tool's usage: direct's is the kernel's, strait's
	// its two gateways'; the userspace emulator that carries edg5's links
	// is measured apart.
	for _, c := range cells {
		u := c.Usage
		switch {
		case u == nil:
			t.Errorf("%+v: no usage", c.Cell)
		case c.Tool == "direct" && (!u.Kernel || u.CPUSeconds != nil):
			t.Errorf("%+v: usage %+v, want kernel without a CPU figure", c.Cell, u)
		case c.Tool == "strait" && (u.Kernel || u.CPUSeconds == nil || len(u.Processes) != 2 || u.CPUPer10kRequests == nil):
			t.Errorf("%+v: usage %+v, want both gateways' CPU and CPU per 10 000 requests", c.Cell, u)
		case md.Emulation == "userspace" && u.EmulatorCPUSeconds == nil:
			t.Errorf("%+v: the userspace emulator's CPU not measured", c.Cell)
		}
	}
}

// TestKeepAliveMatrixReduced runs four cells of the keep-alive matrix (the
// README's performance table): seed 001's cloud10 and seed 000's edg10, echo
// 1 KB and 10 KB, 20 requests, direct and strait. It checks that every
// request succeeded and that each strait cell has its ratio to direct with
// an interval; the ratios themselves are the lab's to judge on a quiet host.
func TestKeepAliveMatrixReduced(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	state := t.TempDir()
	// A short directory: the gateways' admin sockets live in the run
	// directory, and a unix socket's path has at most 107 bytes.
	out, err := os.MkdirTemp("", "kam")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	t.Cleanup(func() { downLabsIn(state) })
	cmd := exec.Command(bin, "lab", "run", "../../examples/experiments/keepalive-matrix.yaml", "--scenarios", "cloud10,edg10",
		"--payloads", "1KB,10KB", "--requests", "20", "--out", out)
	cmd.Env = append(os.Environ(), lab.StateDirEnv+"="+state)
	// The file holds the host's CPU latency QoS at 0 while it measures:
	// the kernel's own limit, read while the run lasts, must be 0, and be
	// what it was before once the run is over.
	before, qosErr := cpulatency.Current()
	if qosErr != nil {
		t.Logf("measuring the host as it is: %v", qosErr)
		cmd.Args = append(cmd.Args, "--cpu-latency", "host")
	}
	lowest := make(chan time.Duration, 1)
	done := make(chan struct{})
	go func() {
		low := cpulatency.Max
		for {
			if cur, err := cpulatency.Current(); err == nil {
				low = min(low, cur)
			}
			select {
			case <-done:
				lowest <- low
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	stdout, err := cmd.CombinedOutput()
	close(done)
	if err != nil {
		t.Fatalf("strait lab run keepalive-matrix (reduced): %v\n%s", err, stdout)
	}
	if qosErr == nil {
		if low := <-lowest; low != 0 {
			t.Errorf("the host's CPU latency limit was never below %v while the run measured, want 0 (cpu-latency: 0)", low)
		}
		if after, err := cpulatency.Current(); err != nil || after != before {
			t.Errorf("after the run the host's CPU latency limit is %v (%v), want %v as before", after, err, before)
		}
		if !bytes.Contains(stdout, []byte("CPU latency QoS held at 0 µs")) {
			t.Errorf("the run did not say it holds the CPU latency:\n%s", stdout)
		}
	}
	dir := runDirIn(t, out)
	var md run.Metadata
	readJSON(t, filepath.Join(dir, "metadata.json"), &md)
	if got := md.Host["cpu latency QoS"]; qosErr == nil && got != "held at 0 µs by the run" {
		t.Errorf("metadata host[cpu latency QoS] = %q, want held at 0 µs", got)
	}
	cells := readCells(t, dir)
	if len(cells) != 8 {
		t.Fatalf("%d cells, want 8 (2 scenarios × 2 payloads × 2 tools)", len(cells))
	}
	for _, c := range cells {
		if c.Count != 20 || c.Errors != 0 {
			t.Errorf("%+v: %d requests, %d errors; want 20, none failed", c.Cell, c.Count, c.Errors)
		}
		if c.Tool != "strait" {
			continue
		}
		if c.RatioIQRMean == nil || *c.RatioIQRMean <= 0 || c.RatioIQRMeanCI == nil || !c.RatioIQRMeanCI.Valid() {
			t.Errorf("%+v: no ratio to direct with an interval", c.Cell)
			continue
		}
		t.Logf("%s %s %d B: strait ÷ direct %.3f [%.3f, %.3f]", c.Scenario, c.Workload, c.Payload, *c.RatioIQRMean, c.RatioIQRMeanCI.Lo, c.RatioIQRMeanCI.Hi)
	}
	if !bytes.Contains(stdout, []byte("vs direct")) {
		t.Errorf("table without the ratio column:\n%s", stdout)
	}
}

// TestWireguardTool carries echo requests through the wireguard tool
// (wireguard-go between the gateway nodes) and checks they all succeed.
func TestWireguardTool(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("wireguard-go"); err != nil {
		t.Skip("wireguard-go not installed (scripts/setup.sh installs it)")
	}
	bin := testenv.StraitBinary(t)
	state := t.TempDir()
	out := t.TempDir()
	t.Cleanup(func() { downLabsIn(state) })
	file, _ := experiment(t, "[lcl]", 5, `  - {name: echo, payloads: [1KB, 100KB]}`)
	cmd := exec.Command(bin, "lab", "run", file, "--tools", "direct,wireguard", "--out", out)
	cmd.Env = append(os.Environ(), lab.StateDirEnv+"="+state)
	stdout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("strait lab run: %v\n%s", err, stdout)
	}
	cells := readCells(t, runDirIn(t, out))
	seen := 0
	for _, c := range cells {
		if c.Tool == "wireguard" {
			seen++
			if c.Count != 5 || c.Errors != 0 {
				t.Errorf("%+v: %d requests, %d errors", c.Cell, c.Count, c.Errors)
			}
		}
	}
	if seen != 2 {
		t.Errorf("%d wireguard cells, want 2", seen)
	}
}

// TestRateAndStreams runs an experiment of only open-loop and stream
// measurements through direct and strait: rate.json holds every cell's
// exact request count and merged percentiles, throughput.json the bulk and
// rr cells, and the report their tables.
func TestRateAndStreams(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.StraitBinary(t)
	state := t.TempDir()
	out := t.TempDir()
	t.Cleanup(func() { downLabsIn(state) })
	text := `name: rate
topology:
  name: ` + testenv.UniqueName("r") + `
  clusters:
    - name: a
      nodes: [{name: gw, gateway: true}, {name: server}]
    - name: b
      nodes: [{name: gw, gateway: true}, {name: client}]
  wan:
    - between: [a, b]
scenarios: [lcl]
tools: [direct, strait]
server: a/server
client: b/client
rate: {rps: 200, connections: 2, duration: 1s, warmup: 200ms, workloads: [{name: echo, payloads: [1KB], kpi: 5s}]}
throughput: {streams: [1], duration: 500ms, rr: [64]}
`
	file := filepath.Join(t.TempDir(), "rate.yaml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "lab", "run", file, "--out", out)
	cmd.Env = append(os.Environ(), lab.StateDirEnv+"="+state)
	stdout, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("strait lab run: %v\n%s", err, stdout)
	}
	dir := runDirIn(t, out)
	var rate []report.RateSummary
	readJSON(t, filepath.Join(dir, "rate.json"), &rate)
	if len(rate) != 2 {
		t.Fatalf("%d rate cells, want direct and strait", len(rate))
	}
	for _, c := range rate {
		// The schedule is exact: 1 s at 200/s is 200 requests.
		if c.Count != 200 || c.Errors != 0 || len(c.Repetitions) != 1 || c.Latency.P50 <= 0 || c.Latency.P100 < c.Latency.P99 {
			t.Errorf("%+v: want 200 requests, no errors, ordered percentiles", c)
		}
	}
	var tput []report.ThroughputSummary
	readJSON(t, filepath.Join(dir, "throughput.json"), &tput)
	if len(tput) != 4 {
		t.Fatalf("%d throughput cells, want bulk and rr × 2 tools", len(tput))
	}
	for _, c := range tput {
		if c.Reps() != 1 || (c.RR == 0 && c.MeanGbps <= 0) || (c.RR == 64 && (c.MeanTPS <= 0 || len(c.RTT) != 1)) {
			t.Errorf("%+v: want one measured repetition", c)
		}
	}
	var md run.Metadata
	readJSON(t, filepath.Join(dir, "metadata.json"), &md)
	if md.Rate == nil || md.Rate.Connections != 2 || md.KPIs["echo"] != 5000 || md.Host["kernel"] == "" || md.Host["cpu"] == "" {
		t.Errorf("metadata: rate %+v, kpis %v, host %v", md.Rate, md.KPIs, md.Host)
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{`id="rate-echo-1KB-200"`, `id="throughput-bulk"`, `id="throughput-rr"`} {
		if !bytes.Contains(html, []byte(id)) {
			t.Errorf("report.html lacks %s", id)
		}
	}
	if !bytes.Contains(stdout, []byte("p99 vs direct")) || !bytes.Contains(stdout, []byte("TCP request/response rate:")) {
		t.Errorf("no rate and rr tables on stdout:\n%s", stdout)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// runDirIn returns the one run directory under out.
func runDirIn(t *testing.T, out string) string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(out, "*", "summary.json"))
	if len(dirs) != 1 {
		t.Fatalf("run directories with a summary under %s: %v", out, dirs)
	}
	return filepath.Dir(dirs[0])
}

func readCells(t *testing.T, dir string) []run.CellResult {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cells []run.CellResult
	if err := json.Unmarshal(b, &cells); err != nil {
		t.Fatal(err)
	}
	return cells
}

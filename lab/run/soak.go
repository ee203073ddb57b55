package run

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/tool"
	"github.com/strait-net/strait/load"
	"github.com/strait-net/strait/report/html"
)

// Soak configures a long run under mixed load (README "Soak"): through
// every tool at once, a fixed request rate (`strait load rate`, latency
// corrected for coordinated omission), a loop of new connections (`strait
// load seq` without keep-alive) and one bulk echo of large bodies on a
// kept connection whose bytes are compared; meanwhile the tool's
// processes are sampled every Interval. After the warm-up every series
// must stay within Tolerance of its median, and no request may fail.
//
//	soak:
//	  duration: 10m       # --duration on `strait lab run` overrides it
//	  interval: 5s
//	  warmup: 0.2         # fraction of the duration the verdict ignores
//	  tolerance: 0.1
//	  rate: 1000          # requests/s of payload bytes, echoed
//	  payload: 1KB
//	  connections: 10
//	  churn-think: 20ms   # pause between new connections (one loop)
//	  bulk: 1MB           # body of each bulk echo; 0: no bulk stream
//	  bulk-think: 100ms
type Soak struct {
	Duration    string  `yaml:"duration" json:"duration"`
	Interval    string  `yaml:"interval" json:"interval"`
	Warmup      float64 `yaml:"warmup" json:"warmup"`
	Tolerance   float64 `yaml:"tolerance" json:"tolerance"`
	Rate        float64 `yaml:"rate" json:"rate"`
	Payload     string  `yaml:"payload" json:"payload"`
	Connections int     `yaml:"connections" json:"connections"`
	ChurnThink  string  `yaml:"churn-think" json:"churn-think"`
	Bulk        string  `yaml:"bulk" json:"bulk"`
	BulkThink   string  `yaml:"bulk-think" json:"bulk-think"`

	duration, interval, churnThink, bulkThink time.Duration
	payload, bulk                             int
}

// soakWorkload is the workload every part of the soak drives: echo, so
// that every response's bytes can be compared with the request's.
const soakWorkload = "echo"

func (s *Soak) validate() error {
	var err error
	durations := []struct {
		field, v, def string
		dst           *time.Duration
		lo            time.Duration
	}{
		{"duration", s.Duration, "10m", &s.duration, time.Second},
		{"interval", s.Interval, "5s", &s.interval, 100 * time.Millisecond},
		{"churn-think", s.ChurnThink, "20ms", &s.churnThink, 0},
		{"bulk-think", s.BulkThink, "100ms", &s.bulkThink, 0},
	}
	for _, d := range durations {
		v := d.v
		if v == "" {
			v = d.def
		}
		if *d.dst, err = emulation.ParseDuration(v); err != nil || *d.dst < d.lo || *d.dst > 24*time.Hour {
			return fmt.Errorf("soak.%s %q: want a duration between %v and 24h", d.field, d.v, d.lo)
		}
	}
	if s.interval*3 > s.duration {
		return fmt.Errorf("soak.interval %v: want at least three samples in soak.duration %v", s.interval, s.duration)
	}
	if s.Warmup == 0 {
		s.Warmup = 0.2
	}
	if math.IsNaN(s.Warmup) || s.Warmup < 0 || s.Warmup >= 0.9 {
		return fmt.Errorf("soak.warmup %v: want a fraction of the duration in [0, 0.9)", s.Warmup)
	}
	if s.Tolerance == 0 {
		s.Tolerance = 0.1
	}
	if math.IsNaN(s.Tolerance) || s.Tolerance < 0 || s.Tolerance > 10 {
		return fmt.Errorf("soak.tolerance %v: want a relative deviation such as 0.1", s.Tolerance)
	}
	if s.Rate == 0 {
		s.Rate = 1000
	}
	if math.IsNaN(s.Rate) || s.Rate < 1 || s.Rate > load.MaxRate {
		return fmt.Errorf("soak.rate %v: want requests/s between 1 and %v", s.Rate, float64(load.MaxRate))
	}
	if s.Connections == 0 {
		s.Connections = 10
	}
	if s.Connections < 1 || s.Connections > load.MaxConnections {
		return fmt.Errorf("soak.connections %d: want 1 to %d", s.Connections, load.MaxConnections)
	}
	if s.Payload == "" {
		s.Payload = "1KB"
	}
	if s.payload, err = ParseSize(s.Payload); err != nil {
		return fmt.Errorf("soak.payload: %w", err)
	}
	if s.Bulk == "" {
		s.Bulk = "1MB"
	}
	if s.bulk, err = ParseSize(s.Bulk); err != nil {
		return fmt.Errorf("soak.bulk: %w", err)
	}
	return nil
}

// soakPath is where one unit's soak of a tool is recorded.
func soakPath(dir, scenario, tool string, rep int, ext string) string {
	return filepath.Join(dir, "soak", fmt.Sprintf("%s-%s-r%d%s", scenario, tool, rep, ext))
}

// soakSlack is the absolute deviation every series may have whatever its
// relative size: one in-flight churn connection and bulk request hold a
// few goroutines and descriptors in each gateway, which is more than 10 %
// of the small counts an idle gateway has. Latency and RSS have none.
// A latency percentile may drift by 0.1 ms, the scheduling noise of a
// Go timer on a busy host.
var soakSlack = map[string]float64{"goroutines": 16, "fds": 8, latencyUnit: 0.1}

const latencyUnit = "latency ms"

// measureSoak runs the soak through one tool and records its result.
func (r *runner) measureSoak(ctx context.Context, t tool.Tool, env tool.Env, target, scenario string, rep int) (*html.SoakResult, error) {
	s := r.e.Soak
	if err := os.MkdirAll(filepath.Join(r.dir, "soak"), 0o755); err != nil {
		return nil, err
	}
	base := soakPath(r.dir, scenario, t.Name(), rep, "")
	url := "http://" + target + "/"
	res := &html.SoakResult{
		Scenario: scenario, Tool: t.Name(), Rep: rep,
		DurationSec: s.duration.Seconds(), IntervalSec: s.interval.Seconds(),
		WarmupSec: math.Round(s.duration.Seconds()*s.Warmup*10) / 10, Tolerance: s.Tolerance,
		Load: fmt.Sprintf("%v requests/s of %d B over %d kept connections; a new connection per %d B request every %v; %d B bulk echoes every %v on one kept connection",
			s.Rate, s.payload, s.Connections, s.payload, s.churnThink, s.bulk, s.bulkThink),
	}
	clients := []struct {
		name string
		args []string
	}{
		{"rate", []string{"load", "rate", "--url", url, "--rate", strconv.FormatFloat(s.Rate, 'f', -1, 64),
			"--connections", strconv.Itoa(s.Connections), "--payload", strconv.Itoa(s.payload),
			"--duration", s.duration.String(), "--interval", s.interval.String(), "--intervals", base + "-rate.jsonl",
			"--json", base + "-rate.json", "--verify-echo"}},
		{"churn", []string{"load", "seq", "--url", url, "--requests", "1", "--duration", s.duration.String(),
			"--keepalive=false", "--payload", strconv.Itoa(s.payload), "--think", s.churnThink.String(),
			"--verify-echo", "--csv", base + "-churn.csv", "--quiet"}},
	}
	if s.bulk > 0 {
		clients = append(clients, struct {
			name string
			args []string
		}{"bulk", []string{"load", "seq", "--url", url, "--requests", "1", "--duration", s.duration.String(),
			"--keepalive=true", "--payload", strconv.Itoa(s.bulk), "--think", s.bulkThink.String(),
			"--verify-echo", "--csv", base + "-bulk.csv", "--quiet"}})
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	for i, c := range clients {
		cmd, err := env.Lab.Command(cctx, env.Client.ID, append([]string{r.opts.Binary}, c.args...)...)
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("soak %s client: %w: %s", c.name, err, strings.TrimSpace(string(out)))
				cancel()
			}
		})
	}
	samples := r.sampleSoak(cctx, t, env, started, s.interval, s.duration)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	series := samples.series()
	lat, err := rateSeries(base+"-rate.jsonl", base+"-rate.json", res)
	if err != nil {
		return nil, err
	}
	series = append(series, lat...)
	for _, part := range []string{"churn", "bulk"} {
		if part == "bulk" && s.bulk == 0 {
			continue
		}
		ps, err := seqSeries(base+"-"+part+".csv", part, s.bulk, started, s.interval, res)
		if err != nil {
			return nil, err
		}
		series = append(series, ps...)
	}
	res.Pass = res.Errors == 0 && res.Corrupted == 0
	for i := range series {
		slack := soakSlack[series[i].Unit]
		series[i].Judge(res.WarmupSec, s.Tolerance, slack)
		if series[i].Judged && !series[i].Pass {
			res.Pass = false
		}
	}
	res.Series = series
	if err := writeSoakCSV(base+".csv", series); err != nil {
		return nil, err
	}
	return res, writeJSON(base+".json", res)
}

// soakSamples are the tool's processes sampled over time: per process,
// per quantity, the values at the sample times.
type soakSamples struct {
	t      []float64
	values map[string]map[string][]float64 // process label → unit → values
	labels []string
}

func (s *soakSamples) add(label, unit string, i int, v float64) {
	m, ok := s.values[label]
	if !ok {
		m = map[string][]float64{}
		s.values[label] = m
		s.labels = append(s.labels, label)
	}
	for len(m[unit]) < i {
		m[unit] = append(m[unit], math.NaN()) // a sample this process missed
	}
	m[unit] = append(m[unit], v)
}

func (s *soakSamples) series() []html.SoakSeries {
	var out []html.SoakSeries
	for _, unit := range []string{"RSS MiB", "fds", "goroutines"} {
		for _, l := range s.labels {
			v, ok := s.values[l][unit]
			if !ok {
				continue
			}
			for len(v) < len(s.t) {
				v = append(v, math.NaN())
			}
			var ts, vs []float64
			for i := range s.t {
				if !math.IsNaN(v[i]) {
					ts, vs = append(ts, s.t[i]), append(vs, v[i])
				}
			}
			out = append(out, html.SoakSeries{Name: l + " " + unitName(unit), Unit: unit, T: ts, V: vs, Criterion: html.Band})
		}
	}
	return out
}

func unitName(unit string) string {
	if unit == "RSS MiB" {
		return "RSS"
	}
	return unit
}

// sampleSoak samples t's processes every interval until d has passed
// since started or ctx ends: RSS and open descriptors from /proc (what
// the Prometheus process collector reads, for any tool's process), and a
// strait gateway's goroutines from its /metrics.
func (r *runner) sampleSoak(ctx context.Context, t tool.Tool, env tool.Env, started time.Time, interval, d time.Duration) *soakSamples {
	s := &soakSamples{values: map[string]map[string][]float64{}}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for k := 0; ; k++ {
		// The clients stop at d and release their connections: a
		// sample there would measure the end, not the soak.
		at := started.Add(time.Duration(k) * interval)
		if at.Sub(started) >= d {
			return s
		}
		timer.Reset(time.Until(at))
		select {
		case <-ctx.Done():
			return s
		case <-timer.C:
		}
		i := len(s.t)
		s.t = append(s.t, math.Round(time.Since(started).Seconds()*100)/100)
		for _, p := range t.Processes() {
			label := p.Node + " " + p.Name
			if rss, err := procRSS(p.PID); err == nil {
				s.add(label, "RSS MiB", i, rss)
			}
			if fds, err := procFDs(p.PID); err == nil {
				s.add(label, "fds", i, fds)
			}
			if p.Name == "gateway" && strings.HasPrefix(t.Name(), "strait") {
				if g, err := r.scrapeGoroutines(ctx, env, p.Node); err == nil {
					s.add(label, "goroutines", i, g)
				} else {
					r.opts.Logger.Warn("soak: scrape metrics", "node", p.Node, "err", err)
				}
			}
		}
	}
}

// procRSS is a process's resident set in MiB, from /proc/PID/status.
func procRSS(pid int) (float64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	v, err := parseVmRSS(f)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// parseVmRSS reads the VmRSS line of a /proc/PID/status text ("VmRSS:
// 1234 kB", proc(5)) as MiB.
func parseVmRSS(r io.Reader) (float64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(v), " ")
		kb, err := strconv.ParseUint(num, 10, 64)
		if err != nil || strings.TrimSpace(unit) != "kB" {
			return 0, fmt.Errorf("VmRSS %q: want a number of kB", strings.TrimSpace(v))
		}
		return float64(kb) / 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no VmRSS line (a kernel thread or an exited process)")
}

// procFDs counts a process's open file descriptors.
func procFDs(pid int) (float64, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return float64(len(ents)), nil
}

// scrapeGoroutines reads go_goroutines from the strait gateway on node's
// /metrics. The lab reaches a namespace only through processes placed in
// it (lab.Command), so curl fetches the page from the gateway's own node.
func (r *runner) scrapeGoroutines(ctx context.Context, env tool.Env, node string) (float64, error) {
	n, err := env.Lab.Node(node)
	if err != nil {
		return 0, err
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd, err := env.Lab.Command(sctx, node, "curl", "-sS", "--max-time", "4", "http://"+tool.MetricsAddr(n)+"/metrics")
	if err != nil {
		return 0, err
	}
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("curl %s/metrics: %w", tool.MetricsAddr(n), err)
	}
	return metricValue(string(out), "go_goroutines")
}

// metricValue reads a gauge from a Prometheus text exposition.
func metricValue(text, name string) (v float64, err error) {
	// expfmt's parser panics on some malformed pages (one that starts with
	// "{}", FuzzMetricValue found): a bad page is an error here, not a
	// crashed run.
	defer func() {
		if r := recover(); r != nil {
			v, err = 0, fmt.Errorf("parse metrics: malformed exposition (%v)", r)
		}
	}()
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return 0, fmt.Errorf("parse metrics: %w", err)
	}
	f, ok := fams[name]
	if !ok || len(f.GetMetric()) == 0 || f.GetMetric()[0].GetGauge() == nil {
		return 0, fmt.Errorf("metrics: no gauge %s", name)
	}
	return f.GetMetric()[0].GetGauge().GetValue(), nil
}

// rateSeries reads the fixed-rate client's interval log into p50 and p99
// latency series and adds its totals to res.
func rateSeries(jsonl, summary string, res *html.SoakResult) ([]html.SoakSeries, error) {
	var sum load.RateResult
	b, err := os.ReadFile(summary)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		return nil, fmt.Errorf("%s: %w", summary, err)
	}
	res.Requests += sum.Count + sum.Errors
	res.Errors += sum.Errors
	res.Corrupted += sum.ErrorClasses["echo"]
	res.AnsweredRate = sum.Answered()
	res.AchievedRate = sum.AchievedRate
	if sum.FirstError != "" && res.FirstError == "" {
		res.FirstError = "rate: " + sum.FirstError
	}
	f, err := os.Open(jsonl)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p50 := html.SoakSeries{Name: "rate p50", Unit: latencyUnit, Criterion: html.Drift}
	p99 := html.SoakSeries{Name: "rate p99", Unit: latencyUnit, Criterion: html.Drift}
	dec := json.NewDecoder(f)
	for {
		var iv load.RateInterval
		if err := dec.Decode(&iv); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", jsonl, err)
		}
		// The last slice holds only the stragglers of the drain.
		if iv.Count == 0 || iv.EndSec-iv.StartSec < 0.99*res.IntervalSec {
			continue
		}
		p50.T, p50.V = append(p50.T, iv.EndSec), append(p50.V, float64(iv.Latency.P50)/1000)
		p99.T, p99.V = append(p99.T, iv.EndSec), append(p99.V, float64(iv.Latency.P99)/1000)
	}
	return []html.SoakSeries{p50, p99}, nil
}

// seqSeries reads a closed-loop client's requests (churn or bulk) into a
// per-interval p99 series and adds its totals to res.
func seqSeries(path, part string, payload int, started time.Time, interval time.Duration, res *html.SoakResult) ([]html.SoakSeries, error) {
	samples, err := readSamples(path)
	if err != nil {
		return nil, err
	}
	buckets := map[int][]float64{}
	for _, s := range samples {
		res.Requests++
		if !s.OK() {
			res.Errors++
			if strings.HasPrefix(s.Err, "echo mismatch") {
				res.Corrupted++
			}
			if res.FirstError == "" {
				res.FirstError = part + ": " + s.Err
			}
			continue
		}
		if part == "churn" {
			res.Connections++
		} else {
			res.BulkBytes += int64(payload)
		}
		k := int(s.Start.Sub(started) / interval)
		buckets[k] = append(buckets[k], float64(s.Total)/float64(time.Millisecond))
	}
	keys := make([]int, 0, len(buckets))
	for k := range buckets {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	p99 := html.SoakSeries{Name: part + " p99", Unit: latencyUnit, Criterion: html.Drift}
	for _, k := range keys {
		v := buckets[k]
		sort.Float64s(v)
		p99.T = append(p99.T, (time.Duration(k+1) * interval).Seconds())
		p99.V = append(p99.V, v[min(len(v)-1, int(math.Ceil(0.99*float64(len(v))))-1)])
	}
	return []html.SoakSeries{p99}, nil
}

// writeSoakCSV writes every series in long form: one row per sample.
func writeSoakCSV(path string, series []html.SoakSeries) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"t_s", "series", "unit", "value"})
	for _, s := range series {
		for i := range s.T {
			_ = w.Write([]string{strconv.FormatFloat(s.T[i], 'f', 2, 64), s.Name, s.Unit, strconv.FormatFloat(s.V[i], 'g', 6, 64)})
		}
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// aggregateSoak reads every recorded soak of the run, in file order.
func (r *runner) aggregateSoak() ([]html.SoakResult, error) {
	if r.e.Soak == nil {
		return nil, nil
	}
	paths, err := filepath.Glob(filepath.Join(r.dir, "soak", "*.json"))
	if err != nil {
		return nil, err
	}
	out := []html.SoakResult{}
	for _, p := range paths {
		if strings.HasSuffix(p, "-rate.json") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var s html.SoakResult
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// writeSoakTable prints each soak's verdict and its series' ranges.
func writeSoakTable(w io.Writer, soaks []html.SoakResult) {
	for _, s := range soaks {
		verdict := "pass"
		if !s.Pass {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "\nsoak %s %s r%d: %s — %.0f s, warm-up %.0f s, tolerance ±%.0f %%; requests %d, errors %d, corrupted %d, bulk bytes %d, new connections %d, rate answered %.1f/s\n",
			s.Scenario, s.Tool, s.Rep, verdict, s.DurationSec, s.WarmupSec, 100*s.Tolerance, s.Requests, s.Errors, s.Corrupted, s.BulkBytes, s.Connections, s.AnsweredRate)
		if s.FirstError != "" {
			fmt.Fprintf(w, "  first error: %s\n", s.FirstError)
		}
		fmt.Fprintf(w, "  %-40s %8s %10s %8s %8s %8s  %-6s %s\n", "series", "samples", "median", "min dev", "max dev", "drift", "judge", "verdict")
		for _, x := range s.Series {
			v := "pass"
			switch {
			case !x.Judged:
				v = "not judged"
			case !x.Pass && x.Criterion == html.Drift:
				v = "drifted"
			case !x.Pass:
				v = "outside band"
			}
			fmt.Fprintf(w, "  %-40s %8d %10.3f %7.1f%% %7.1f%% %7.1f%%  %-6s %s\n", x.Name+" ("+x.Unit+")", len(x.V), x.Median, 100*x.MinDev, 100*x.MaxDev, 100*x.Drift, x.Criterion, v)
		}
	}
}

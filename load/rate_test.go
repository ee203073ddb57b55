package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/strait-net/strait/apps"
)

func TestRateConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  RateConfig
		want string // substring of the error; "" for valid
	}{
		{"zero value", RateConfig{}, ""},
		{"typical", RateConfig{URL: "http://10.0.0.1:8080/", Rate: 10000, Connections: 100, Payload: 1024, Duration: time.Minute}, ""},
		{"bad url", RateConfig{URL: "https://x/"}, "scheme must be http"},
		{"negative rate", RateConfig{Rate: -1}, "rate -1"},
		{"rate too high", RateConfig{Rate: 2e6}, "rate 2e+06"},
		{"negative connections", RateConfig{Connections: -1}, "connections -1"},
		{"too many connections", RateConfig{Connections: MaxConnections + 1}, "connections 10001"},
		{"negative duration", RateConfig{Duration: -time.Second}, "duration -1s"},
		{"negative warmup", RateConfig{Warmup: -time.Second}, "warmup -1s"},
		{"negative drain", RateConfig{Drain: -time.Second}, "drain -1s"},
		{"negative payload", RateConfig{Payload: -1}, "payload -1"},
		{"bad method", RateConfig{Method: "GE T"}, "method"},
		{"interval too short", RateConfig{Interval: time.Millisecond}, "interval 1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestErrorClass(t *testing.T) {
	tests := map[string]string{
		"connect 127.0.0.1:1: connect: connection refused":      "connect",
		"connect 10.0.0.1:80: timeout after 5s":                 "timeout",
		"read response: response timeout after 1s":              "timeout",
		"read response: EOF":                                    "read",
		"read body after 3 bytes: unexpected EOF":               "read",
		"server sent 5 unexpected bytes on the idle connection": "read",
		"write request: broken pipe":                            "write",
		"status 503":                                            "status",
		"echo mismatch: got 3 bytes, sent 4":                    "echo",
		incomplete:                                              "incomplete",
		"something new":                                         "other",
	}
	for msg, want := range tests {
		if got := errorClass(msg); got != want {
			t.Errorf("errorClass(%q) = %q, want %q", msg, got, want)
		}
	}
}

// assertOrdered checks what holds by construction for every request: the
// corrected latency includes the service time, so each corrected
// percentile is at least the uncorrected one.
func assertOrdered(t *testing.T, r *RateResult) {
	t.Helper()
	lat, svc := r.Latency.Values(), r.ServiceTime.Values()
	for i := range lat {
		// One HDR bucket of slack: both are rounded to 3 significant digits.
		if float64(lat[i]) < float64(svc[i])*0.999-1 {
			t.Errorf("%s: corrected %d µs < service time %d µs", PercentileLabels[i], lat[i], svc[i])
		}
	}
}

func TestRunRateAchievesTarget(t *testing.T) {
	url := startApp(t, apps.Config{Kind: apps.Echo})
	const rate, d = 2000, 2 * time.Second
	r, err := RunRate(t.Context(), RateConfig{
		URL: url, Rate: rate, Connections: 4, Payload: 1024, VerifyEcho: true,
		Duration: d, Warmup: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The schedule is exact: every intended start in the window is sent
	// once and answered once.
	if r.Scheduled != rate*2 || r.Count != r.Scheduled || r.Errors != 0 {
		t.Fatalf("scheduled %d, count %d, errors %d (first: %s); want %d, %d, 0",
			r.Scheduled, r.Count, r.Errors, r.FirstError, rate*2, rate*2)
	}
	if got := r.Histogram().TotalCount(); got != r.Count {
		t.Errorf("histogram holds %d values, count is %d", got, r.Count)
	}
	// The encoded histogram in the JSON is the same distribution.
	if merged, err := MergeLatency(&RateResult{LatencyHistogram: r.LatencyHistogram}); err != nil || merged != r.Latency {
		t.Errorf("latency_histogram decodes to %+v (%v), want %+v", merged, err, r.Latency)
	}
	// Achieved falls short of the target only by the last responses'
	// latency: the window ends at the last answer, which came at most the
	// largest corrected latency after the last intended start. How late
	// that is depends on how busy the machine is, so the bound is the
	// run's own latency, not a share of the target rate.
	if r.AchievedRate > rate {
		t.Errorf("achieved %.2f requests/s, above the target %d", r.AchievedRate, rate)
	}
	if maxLat := float64(r.Latency.P100) / 1e6; r.ElapsedSec < r.DurationSec || r.ElapsedSec > r.DurationSec+maxLat+1e-6 {
		t.Errorf("elapsed %.6f s, want between the duration %.1f s and it plus the largest latency %.6f s", r.ElapsedSec, r.DurationSec, maxLat)
	}
	if want := float64(r.Count+r.Errors) / r.ElapsedSec; math.Abs(r.AchievedRate-want) > 0.01 {
		t.Errorf("achieved %.2f requests/s, want %d in %.6f s = %.2f", r.AchievedRate, r.Count+r.Errors, r.ElapsedSec, want)
	}
	if r.AnsweredRate != r.AchievedRate || r.Unsent != 0 {
		t.Errorf("answered %.2f requests/s, %d unsent; with no errors want the achieved %.2f and none", r.AnsweredRate, r.Unsent, r.AchievedRate)
	}
	assertOrdered(t, r)
}

// TestRunRateIntervals checks the interval slices: contiguous from the
// window's start, together holding every measured request once.
func TestRunRateIntervals(t *testing.T) {
	url := startApp(t, apps.Config{Kind: apps.Echo})
	var ivs []RateInterval
	r, err := RunRate(t.Context(), RateConfig{
		URL: url, Rate: 1000, Connections: 2, Payload: 100, VerifyEcho: true,
		Duration: time.Second, Warmup: 100 * time.Millisecond,
		Interval: 250 * time.Millisecond, OnInterval: func(iv RateInterval) { ivs = append(ivs, iv) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ivs) < 4 {
		t.Fatalf("%d slices of a 1 s window at 250 ms, want at least 4: %+v", len(ivs), ivs)
	}
	var count, errs int64
	for i, iv := range ivs {
		count, errs = count+iv.Count, errs+iv.Errors
		if want := 0.25 * float64(i); math.Abs(iv.StartSec-want) > 1e-9 || iv.EndSec <= iv.StartSec {
			t.Errorf("slice %d: %v–%v s, want from %v s", i, iv.StartSec, iv.EndSec, want)
		}
		// Only the last may be shorter: the run ends with its last
		// answer, not on a slice's boundary.
		if i < len(ivs)-1 && math.Abs(iv.EndSec-iv.StartSec-0.25) > 1e-9 {
			t.Errorf("slice %d: %v–%v s, want 250 ms long", i, iv.StartSec, iv.EndSec)
		}
		if iv.Count > 0 && (iv.Latency.P50 <= 0 || iv.Latency.P100 < iv.Latency.P99) {
			t.Errorf("slice %d: percentiles %+v", i, iv.Latency)
		}
	}
	if count != r.Count || errs != r.Errors {
		t.Errorf("slices hold %d requests and %d errors, the window %d and %d", count, errs, r.Count, r.Errors)
	}
}

// stallingHandler echoes, except that the k-th request starts a global
// pause: it and every request arriving in the next d wait until the
// pause ends, as a target's GC pause or lock-up would.
func stallingHandler(k int64, d time.Duration) http.Handler {
	echo := http.HandlerFunc(echoHandler)
	var (
		n     atomic.Int64
		mu    sync.Mutex
		until time.Time
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == k {
			mu.Lock()
			until = time.Now().Add(d)
			mu.Unlock()
		}
		mu.Lock()
		u := until
		mu.Unlock()
		time.Sleep(time.Until(u))
		echo.ServeHTTP(w, r)
	})
}

// echoHandler answers with the request body, as the echo workload does,
// for the tests that serve it through net/http to wrap it in faults.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// countAtLeast counts the values in h that are at least v, give or take
// the values that share v's bucket (3 significant digits: ±0.05%).
func countAtLeast(h *hdrhistogram.Histogram, v int64) int64 {
	var n int64
	for _, b := range h.Distribution() {
		if b.To >= v {
			n += b.Count
		}
	}
	return n
}

func TestRunRateCoordinatedOmission(t *testing.T) {
	const (
		rate  = 1000
		conns = 2
		stall = 200 * time.Millisecond
		// threshold separates "hit by the stall" from normal latency,
		// with a wide margin for a busy machine's scheduling hiccups.
		threshold = stall / 2
	)
	// Request 1200 is one second into the measured window.
	url := startHandler(t, stallingHandler(1200, stall))
	r, err := RunRate(t.Context(), RateConfig{
		URL: url, Rate: rate, Connections: conns, Payload: 64,
		Duration: 3 * time.Second, Warmup: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Count != r.Scheduled {
		t.Fatalf("count %d, scheduled %d, errors %d (%s)", r.Count, r.Scheduled, r.Errors, r.FirstError)
	}
	// Every request whose intended start lies in [a, a+stall-threshold],
	// a being the stall's start, completes after a+stall, so its
	// corrected latency is at least threshold: rate×(stall-threshold)
	// requests, whatever the machine's speed. More may join them (how many
	// depends on how fast the connections catch up with the backlog, so
	// on the machine), which is why there is no upper bound.
	wantMin := int64(rate * (stall - threshold).Seconds())
	got := countAtLeast(r.Histogram(), threshold.Microseconds())
	if got < wantMin {
		t.Errorf("%d corrected latencies ≥ %v, want at least %d", got, threshold, wantMin)
	}
	// Uncorrected, the stall is one slow request per connection: each
	// connection had one request in flight, and the rest waited unseen.
	// A busy machine may add a slow request of its own, never the
	// corrected count's hundred.
	svc := countAtLeast(r.ServiceHistogram(), threshold.Microseconds())
	t.Logf("≥ %v: %d corrected (want ≥ %d), %d uncorrected; p99.9 corrected %d µs, uncorrected %d µs",
		threshold, got, wantMin, svc, r.Latency.P999, r.ServiceTime.P999)
	if svc < 1 || svc > wantMin/4 {
		t.Errorf("%d service times ≥ %v, want 1..%d: the stall must be visible uncorrected, and only on the requests in flight", svc, threshold, wantMin/4)
	}
	// With 3000 requests, p99.9 is the 3rd slowest: among the stalled ones
	// when corrected. (Uncorrected it is a normal request on a quiet
	// machine, but one scheduling hiccup of a busy one adds slow service
	// times; the count above bounds those.)
	if lat := time.Duration(r.Latency.P999) * time.Microsecond; lat < threshold {
		t.Errorf("p99.9 corrected %v, want ≥ %v", lat, threshold)
	}
	if max := time.Duration(r.Latency.P100) * time.Microsecond; max < stall {
		t.Errorf("max corrected latency %v, want ≥ the %v stall", max, stall)
	}
	assertOrdered(t, r)
}

// dyingServer echoes n requests, then shuts down for good: listener and
// connections closed.
func dyingServer(t *testing.T, n int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	echo := http.HandlerFunc(echoHandler)
	var count atomic.Int64
	srv := &http.Server{}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if count.Add(1) > n {
			go srv.Close()
			panic(http.ErrAbortHandler)
		}
		echo.ServeHTTP(w, r)
	})
	srv.ErrorLog = nil
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return "http://" + ln.Addr().String() + "/"
}

func TestRunRateDyingServer(t *testing.T) {
	const rate = 500
	url := dyingServer(t, 150)
	r, err := RunRate(t.Context(), RateConfig{
		URL: url, Rate: rate, Connections: 3, Payload: 16, Duration: time.Second,
		ConnectTimeout: time.Second, ResponseTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Count+r.Errors != r.Scheduled {
		t.Fatalf("count %d + errors %d != scheduled %d", r.Count, r.Errors, r.Scheduled)
	}
	// The server answers 150 requests and never another.
	if r.Count > 150 || r.Errors < r.Scheduled-150 {
		t.Errorf("count %d, errors %d of %d scheduled; want at most 150 answered", r.Count, r.Errors, r.Scheduled)
	}
	if r.ErrorClasses["connect"] == 0 || r.FirstError == "" {
		t.Errorf("error classes %v, first error %q; want connect errors", r.ErrorClasses, r.FirstError)
	}
	// Answered counts the answers only; the failed requests ended on
	// schedule, so achieved (answered or failed) stays near the target.
	if want := float64(r.Count) / r.ElapsedSec; math.Abs(r.AnsweredRate-want) > 0.01 || r.Answered() != r.AnsweredRate {
		t.Errorf("answered %.2f requests/s (Answered %.2f), want %d in %.3f s = %.2f", r.AnsweredRate, r.Answered(), r.Count, r.ElapsedSec, want)
	}
	if r.AchievedRate < 0.9*rate || r.AnsweredRate > 200 {
		t.Errorf("achieved %.2f, answered %.2f requests/s; want the failures in the first only", r.AchievedRate, r.AnsweredRate)
	}
	// A result written before answered_rate: the answered share of the
	// achieved rate.
	old := RateResult{Count: 46080, Errors: 3870, ElapsedSec: 10, AchievedRate: 4995}
	if got := old.Answered(); got != 4608 {
		t.Errorf("answered rate of a result without the field %.2f, want 4608", got)
	}
}

// TestRunRateUnsent: requests whose connection never reached them before
// the drain ended count as errors and as unsent; a request cut off in
// flight is an error but was sent.
func TestRunRateUnsent(t *testing.T) {
	url := stallingServer(t)
	r, err := RunRate(t.Context(), RateConfig{
		URL: url, Rate: 200, Connections: 1, Payload: 16, Duration: 200 * time.Millisecond,
		Drain: 100 * time.Millisecond, ResponseTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The one connection's first request hangs until the drain ends: it
	// is cut off in flight, and the rest never leave.
	if r.Count != 0 || r.Errors != r.Scheduled || r.Unsent != r.Scheduled-1 || r.ErrorClasses["incomplete"] != r.Scheduled {
		t.Errorf("count %d, errors %d (%v), unsent %d of %d scheduled; want every request an incomplete error, all but the first unsent",
			r.Count, r.Errors, r.ErrorClasses, r.Unsent, r.Scheduled)
	}
	if r.AnsweredRate != 0 || r.AchievedRate == 0 {
		t.Errorf("answered %.2f, achieved %.2f requests/s; want none answered", r.AnsweredRate, r.AchievedRate)
	}
}

func TestRunRateCancel(t *testing.T) {
	url := startApp(t, apps.Config{Kind: apps.Hello})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	r, err := RunRate(ctx, RateConfig{URL: url, Rate: 500, Connections: 2, Duration: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want deadline exceeded", err)
	}
	if r == nil || r.Count == 0 || r.Count >= r.Scheduled || r.Errors != 0 {
		t.Fatalf("result %+v: want some requests, not all, and no errors for the cut-off ones", r)
	}
}

func TestRateResultJSON(t *testing.T) {
	in := RateResult{
		URL: "http://127.0.0.1:8080/", Method: "POST", Payload: 1024, Connections: 100,
		TargetRate: 10000, WarmupSec: 5, DurationSec: 30, Scheduled: 300000, Count: 299990,
		Errors: 10, ErrorClasses: map[string]int64{"timeout": 10}, FirstError: "read response: response timeout after 1s",
		ElapsedSec: 30.001, AchievedRate: 9999.67,
		Latency:     Percentiles{Mean: 512.5, StdDev: 80.1, P50: 500, P75: 600, P90: 700, P99: 900, P999: 1500, P9999: 9000, P100: 20000},
		ServiceTime: Percentiles{Mean: 400, P50: 400, P75: 450, P90: 500, P99: 800, P999: 1000, P9999: 2000, P100: 19000},
		SendLag:     Percentiles{Mean: 40, P50: 30, P100: 1000},
	}
	var buf bytes.Buffer
	if err := in.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var out RateResult
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the result:\n in  %+v\n out %+v", in, out)
	}
	// The schema: these names are what reports read; add, never rename.
	var m map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"achieved_rate", "answered_rate", "connections", "count", "duration_s", "elapsed_s", "error_classes", "errors",
		"first_error", "latency", "method", "payload_bytes", "scheduled", "send_lag", "service_time", "target_rate", "unsent", "url", "warmup_s"}
	if got := slices.Sorted(mapKeys(m)); !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal(m["latency"], &p); err != nil {
		t.Fatal(err)
	}
	wantP := []string{"mean_us", "p50_us", "p75_us", "p90_us", "p99_99_us", "p99_9_us", "p99_us", "p100_us", "stddev_us"}
	if got := slices.Sorted(mapKeys(p)); !slices.Equal(got, slices.Sorted(slices.Values(wantP))) {
		t.Errorf("latency keys %v, want %v", got, wantP)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestWriteHistogram(t *testing.T) {
	r := &RateResult{latency: newHist()}
	for v := int64(1); v <= 1000; v++ {
		_ = r.latency.RecordValue(v * 100)
	}
	var buf bytes.Buffer
	if err := r.WriteHistogram(&buf); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	if !strings.HasPrefix(s, " Value\tPercentile\tTotalCount\t1/(1-Percentile)") || !strings.Contains(s, "#[Max     =      100.031, Total count    =         1000]") {
		t.Errorf("not HdrHistogram's percentile format in ms:\n%s", s)
	}
	if err := (&RateResult{}).WriteHistogram(&buf); err == nil {
		t.Error("no error for a result without histogram")
	}
}

// BenchmarkRecord is the generator's bookkeeping per request: three HDR
// records under a lock.
func BenchmarkRecord(b *testing.B) {
	rec := &recorder{latency: newHist(), service: newHist(), lag: newHist(), classes: map[string]int64{}}
	t0 := time.Now()
	for b.Loop() {
		rec.ok(t0, t0.Add(10*time.Microsecond), t0.Add(300*time.Microsecond), 290*time.Microsecond)
	}
}

// TestMergeLatency merges two repetitions through their JSON form: the
// merged percentiles are those of all values together, which averaging
// the repetitions' percentiles would not give.
func TestMergeLatency(t *testing.T) {
	encoded := func(lo, hi int64) *RateResult {
		h := newHist()
		for v := lo; v <= hi; v++ {
			_ = h.RecordValue(v)
		}
		enc, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := (&RateResult{LatencyHistogram: string(enc)}).WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		var r RateResult
		if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return &r
	}
	// 1000 values 1..1000 µs and 1000 values 9001..10000 µs.
	p, err := MergeLatency(encoded(1, 1000), encoded(9001, 10000))
	if err != nil {
		t.Fatal(err)
	}
	if p.P50 < 995 || p.P50 > 1001 {
		t.Errorf("merged p50 = %d µs, want about 1000 (the lower half's top)", p.P50)
	}
	if p.P75 < 9490 || p.P75 > 9510 {
		t.Errorf("merged p75 = %d µs, want about 9500", p.P75)
	}
	if p.P100 < 10000 || p.P100 > 10010 {
		t.Errorf("merged max = %d µs, want 10000", p.P100)
	}
	if _, err := MergeLatency(&RateResult{}); err == nil || !strings.Contains(err.Error(), "latency_histogram") {
		t.Errorf("a result without histogram: error %v, want one naming latency_histogram", err)
	}
}

func FuzzDecodeHistogram(f *testing.F) {
	h := newHist()
	_ = h.RecordValue(1234)
	enc, _ := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	f.Add(string(enc))
	f.Add("HISTFAAAACB4nJNpmSzMwMDAzMAAAA==")
	// Edges: nothing, cut short, not base64, and headers rewritten to
	// the extremes (5 significant figures up to 2^63-1, lowest above
	// highest, 0 and 6 figures, a count past the array).
	f.Add("")
	f.Add(string(enc[:len(enc)/2]))
	f.Add("HISTF\xff\xfe")
	f.Add("HISTFAAAACV4nJJpmSzMwMDAzAABrFCasf4/BNh/gAgsFmYCBAAA//+2QAqv")
	f.Add("HISTFAAAACR4nJJpmSzMwMDAzAABUJr5BZTPaP8BwlgszAQIAAD//1ZbBCA=")
	f.Add("HISTFAAAACN4nJJpmSzMwMDAzIAKGCEU8wv7DxDWYmEmQAAAAP//TrcEHQ==")
	f.Add("HISTFAAAACV4nJJpmSzMwMDAzAABbFCaEUIxv7D/AGEtFmYCBAAA//9PXwQj")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := DecodeHistogram(s)
		if err != nil {
			return
		}
		// A decoded histogram must be usable.
		_ = percentilesOf(h)
	})
}

// stallingServer accepts connections and reads requests but never answers.
func stallingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			})
		}
	})
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return "http://" + ln.Addr().String() + "/"
}

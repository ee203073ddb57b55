package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/strait-net/strait/internal/hrtimer"
)

// Defaults used where RateConfig leaves a field zero.
const (
	DefaultRate        = 1000
	DefaultConnections = 10
	DefaultDuration    = 10 * time.Second
	DefaultDrain       = 10 * time.Second
	// MaxRate bounds RateConfig.Rate: one request per microsecond is
	// beyond what one process can send, and the schedule's arithmetic
	// stays exact far below it.
	MaxRate = 1e6
	// MaxConnections bounds RateConfig.Connections.
	MaxConnections = 10000
	// histMax is the largest latency the histograms hold, in µs; larger
	// values are clamped to it (and still counted).
	histMax = int64(60 * time.Second / time.Microsecond)
)

// RateConfig describes a wrk2-like open loop: requests at a constant Rate,
// spread over Connections keep-alive connections, for Duration after
// Warmup. The zero value sends DefaultRate GET requests per second to
// DefaultURL over DefaultConnections connections for DefaultDuration.
type RateConfig struct {
	// URL is the target, http only. Empty means DefaultURL.
	URL string
	// Method is the HTTP method; empty means POST when Payload > 0 and GET
	// otherwise.
	Method string
	// Payload is the exact request body size in bytes, pseudo-random and
	// different for every request (see FillPayload).
	Payload int
	// Rate is the target request rate in requests per second, summed over
	// all connections. Zero means DefaultRate.
	Rate float64
	// Connections is the number of keep-alive connections. Each carries
	// one request at a time (no pipelining, as wrk2), so Rate is reachable
	// only while the service time stays below Connections/Rate. Zero means
	// DefaultConnections.
	Connections int
	// Duration is the measured window. Zero means DefaultDuration.
	Duration time.Duration
	// Warmup runs the same schedule before the measured window and
	// records nothing, so connections, server caches and the Go runtimes
	// on both sides are warm when measuring starts. Connections are
	// opened by their first request, so with no warm-up the first
	// measured request on each pays the TCP handshake.
	Warmup time.Duration
	// Drain bounds how long RunRate waits, after the last intended start,
	// for requests still queued or in flight; those cut off count as
	// errors ("incomplete"). Zero means DefaultDrain.
	Drain time.Duration
	// ConnectTimeout bounds establishing a connection; zero means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds one exchange after connecting; zero means
	// DefaultResponseTimeout.
	ResponseTimeout time.Duration
	// VerifyEcho compares each response body with the request body; a
	// difference makes the request an error.
	VerifyEcho bool
	// Interval, with OnInterval, also reports the measured window in
	// slices of this length (the last one may be shorter), as HdrHistogram
	// interval logs do: a long run's latency over time, which one summary
	// of the whole window hides (the lab's soak experiment plots it).
	// Requests count in the slice in which they complete.
	Interval   time.Duration
	OnInterval func(RateInterval)
}

// RateInterval is one slice of the measured window (RateConfig.Interval).
type RateInterval struct {
	// StartSec and EndSec are offsets from the start of the measured
	// window.
	StartSec float64 `json:"start_s"`
	EndSec   float64 `json:"end_s"`
	Count    int64   `json:"count"`
	Errors   int64   `json:"errors"`
	// Latency is corrected for coordinated omission, as
	// RateResult.Latency.
	Latency Percentiles `json:"latency"`
}

// Validate reports the first invalid field.
func (c RateConfig) Validate() error {
	if err := c.seq().Validate(); err != nil {
		return err
	}
	if math.IsNaN(c.Rate) || c.Rate < 0 || c.Rate > MaxRate {
		return fmt.Errorf("rate %v: must be between 0 and %v requests/s", c.Rate, float64(MaxRate))
	}
	if c.Connections < 0 || c.Connections > MaxConnections {
		return fmt.Errorf("connections %d: must be between 0 and %d", c.Connections, MaxConnections)
	}
	if c.Duration < 0 {
		return fmt.Errorf("duration %v: must not be negative", c.Duration)
	}
	if c.Warmup < 0 {
		return fmt.Errorf("warmup %v: must not be negative", c.Warmup)
	}
	if c.Drain < 0 {
		return fmt.Errorf("drain %v: must not be negative", c.Drain)
	}
	if c.Interval < 0 || c.Interval > 0 && c.Interval < 10*time.Millisecond {
		return fmt.Errorf("interval %v: must be 0 (none) or at least 10ms", c.Interval)
	}
	return nil
}

// seq is the part of c the HTTP client understands.
func (c RateConfig) seq() SeqConfig {
	return SeqConfig{
		URL: c.URL, Method: c.Method, Payload: c.Payload,
		ConnectTimeout: c.ConnectTimeout, ResponseTimeout: c.ResponseTimeout,
		VerifyEcho: c.VerifyEcho,
	}
}

func (c RateConfig) withDefaults() RateConfig {
	if c.URL == "" {
		c.URL = DefaultURL
	}
	if c.Method == "" {
		c.Method = c.seq().method()
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Connections == 0 {
		c.Connections = DefaultConnections
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Drain == 0 {
		c.Drain = DefaultDrain
	}
	return c
}

// Percentiles summarizes a latency distribution in microseconds. The
// percentiles are those wrk2 prints; P100 is the maximum.
type Percentiles struct {
	Mean   float64 `json:"mean_us"`
	StdDev float64 `json:"stddev_us"`
	P50    int64   `json:"p50_us"`
	P75    int64   `json:"p75_us"`
	P90    int64   `json:"p90_us"`
	P99    int64   `json:"p99_us"`
	P999   int64   `json:"p99_9_us"`
	P9999  int64   `json:"p99_99_us"`
	P100   int64   `json:"p100_us"`
}

// PercentileLabels name the fields of Percentiles in order, for tables.
var PercentileLabels = []string{"p50", "p75", "p90", "p99", "p99.9", "p99.99", "p100"}

// Values returns P50 … P100 in the order of PercentileLabels.
func (p Percentiles) Values() []int64 {
	return []int64{p.P50, p.P75, p.P90, p.P99, p.P999, p.P9999, p.P100}
}

func percentilesOf(h *hdrhistogram.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	v := h.ValueAtPercentilesSlice([]float64{50, 75, 90, 99, 99.9, 99.99})
	return Percentiles{
		Mean: math.Round(h.Mean()*10) / 10, StdDev: math.Round(h.StdDev()*10) / 10,
		P50: v[0], P75: v[1], P90: v[2], P99: v[3], P999: v[4], P9999: v[5],
		// Max is the highest value equivalent to the largest recorded
		// one; a percentile above every value is that same value.
		P100: h.Max(),
	}
}

// RateResult is what RunRate measured. Its JSON form (see the field tags)
// is the summary `strait load rate --json` writes.
type RateResult struct {
	URL         string  `json:"url"`
	Method      string  `json:"method"`
	Payload     int     `json:"payload_bytes"`
	Connections int     `json:"connections"`
	TargetRate  float64 `json:"target_rate"`
	WarmupSec   float64 `json:"warmup_s"`
	DurationSec float64 `json:"duration_s"`
	// Scheduled is the number of intended starts in the measured window:
	// Count + Errors when the run was not interrupted.
	Scheduled int64 `json:"scheduled"`
	// Count is the number of measured requests that succeeded; only they
	// are in the latency histograms.
	Count int64 `json:"count"`
	// Errors counts measured requests that failed, by class in
	// ErrorClasses ("connect", "timeout", "status", "echo", "read",
	// "write", "incomplete", "other").
	Errors       int64            `json:"errors"`
	ErrorClasses map[string]int64 `json:"error_classes,omitempty"`
	// Unsent counts the errors that never left: requests whose intended
	// start came and went without their connection reaching them before
	// the drain ended (a generator or target that fell behind). They are
	// in Errors, class "incomplete", with those cut off in flight.
	Unsent     int64  `json:"unsent"`
	FirstError string `json:"first_error,omitempty"`
	// ElapsedSec runs from the start of the measured window to the last
	// completion of a measured request, at least DurationSec.
	ElapsedSec float64 `json:"elapsed_s"`
	// AnsweredRate is Count/ElapsedSec: the requests answered per second,
	// below TargetRate when the target (or the generator) could not keep
	// up or requests failed. Tables and the below-rate check use it.
	AnsweredRate float64 `json:"answered_rate"`
	// AchievedRate is (Count+Errors)/ElapsedSec: the requests that ended
	// per second, answered or failed, those never sent included. It is no
	// throughput (a run that failed half its requests on schedule achieves
	// the target rate); kept for results and tools that read it.
	AchievedRate float64 `json:"achieved_rate"`
	// Latency is measured from each request's intended start: corrected
	// for coordinated omission, what a client arriving on schedule saw.
	Latency Percentiles `json:"latency"`
	// ServiceTime is measured from the actual send (after connecting, if
	// the request had to): uncorrected, what a closed-loop tool reports.
	ServiceTime Percentiles `json:"service_time"`
	// SendLag is how late requests left relative to their intended start:
	// near zero while both the generator and the target keep up.
	SendLag Percentiles `json:"send_lag"`
	// LatencyHistogram is the corrected latency histogram (µs) in
	// HdrHistogram's compressed V2 encoding, base64, as HdrHistogram's own
	// tools and logs carry it: repetitions of a measurement merge into one
	// distribution (MergeLatency) instead of averaging percentiles, which
	// has no meaning for tails.
	LatencyHistogram string `json:"latency_histogram,omitempty"`

	latency, service *hdrhistogram.Histogram
}

// Answered returns the requests answered per second: AnsweredRate, or
// for a result written before that field, the answered share of
// AchievedRate, which is the same Count/ElapsedSec.
func (r *RateResult) Answered() float64 {
	if r.AnsweredRate > 0 || r.Count == 0 {
		return r.AnsweredRate
	}
	return math.Round(r.AchievedRate*float64(r.Count)/float64(r.Count+r.Errors)*100) / 100
}

// DecodeHistogram reads a histogram in HdrHistogram's compressed V2
// encoding (base64), as RateResult.LatencyHistogram holds it.
func DecodeHistogram(s string) (*hdrhistogram.Histogram, error) {
	if s == "" {
		return nil, errors.New("decode histogram: empty")
	}
	h, err := hdrhistogram.Decode([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("decode histogram: %w", err)
	}
	return h, nil
}

// MergeLatency merges the corrected latency histograms of results (e.g.
// the repetitions of one cell, read back from JSON) and returns the
// percentiles of the merged distribution. A result without histogram is
// an error, not a silent gap.
func MergeLatency(results ...*RateResult) (Percentiles, error) {
	merged := newHist()
	for i, r := range results {
		h := r.latency
		if h == nil {
			var err error
			if h, err = DecodeHistogram(r.LatencyHistogram); err != nil {
				return Percentiles{}, fmt.Errorf("result %d: latency_histogram: %w", i, err)
			}
		}
		if dropped := merged.Merge(h); dropped > 0 {
			return Percentiles{}, fmt.Errorf("result %d: %d latencies beyond the histogram's range", i, dropped)
		}
	}
	return percentilesOf(merged), nil
}

// Histogram returns the corrected latency histogram (µs), nil for a
// result read from JSON.
func (r *RateResult) Histogram() *hdrhistogram.Histogram { return r.latency }

// ServiceHistogram returns the uncorrected service-time histogram (µs).
func (r *RateResult) ServiceHistogram() *hdrhistogram.Histogram { return r.service }

// WriteHistogram writes the corrected latency's percentile distribution in
// HdrHistogram's text format, values in milliseconds, as wrk2 --latency
// prints its "Detailed Percentile spectrum" (HdrHistogram's plotter reads
// it).
func (r *RateResult) WriteHistogram(w io.Writer) error {
	if r.latency == nil {
		return fmt.Errorf("write histogram: no histogram")
	}
	_, err := r.latency.PercentilesPrint(w, 5, 1000)
	if err != nil {
		return fmt.Errorf("write histogram: %w", err)
	}
	return nil
}

// WriteJSON writes r as indented JSON.
func (r *RateResult) WriteJSON(w io.Writer) error { return writeJSON(w, r) }

func writeJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	if err := e.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMax, 3) }

// recorder collects the measured requests of all connections. One mutex
// is enough: a record costs tens of nanoseconds, 10^4-10^5 times a
// second, against a request's tens of microseconds.
type recorder struct {
	mu                    sync.Mutex
	latency, service, lag *hdrhistogram.Histogram
	count, errors, unsent int64
	classes               map[string]int64
	firstErr              string
	firstErrAt            time.Time
	lastDone              time.Time
	// The current interval's slice (RateConfig.Interval); nil without.
	slice                   *hdrhistogram.Histogram
	sliceCount, sliceErrors int64
}

// cut ends the current interval slice and starts the next.
func (r *recorder) cut(start, end float64) RateInterval {
	r.mu.Lock()
	defer r.mu.Unlock()
	iv := RateInterval{StartSec: start, EndSec: end, Count: r.sliceCount, Errors: r.sliceErrors, Latency: percentilesOf(r.slice)}
	r.slice.Reset()
	r.sliceCount, r.sliceErrors = 0, 0
	return iv
}

func (r *recorder) ok(intended, sent, done time.Time, service time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	_ = r.latency.RecordValue(min(done.Sub(intended).Microseconds(), histMax))
	_ = r.service.RecordValue(min(service.Microseconds(), histMax))
	_ = r.lag.RecordValue(min(sent.Sub(intended).Microseconds(), histMax))
	if r.slice != nil {
		r.sliceCount++
		_ = r.slice.RecordValue(min(done.Sub(intended).Microseconds(), histMax))
	}
	if done.After(r.lastDone) {
		r.lastDone = done
	}
}

// fail records a failed request; sent is false for one that never left.
func (r *recorder) fail(intended, done time.Time, msg string, sent bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors++
	if !sent {
		r.unsent++
	}
	r.sliceErrors++
	r.classes[errorClass(msg)]++
	if r.firstErr == "" || intended.Before(r.firstErrAt) {
		r.firstErr, r.firstErrAt = msg, intended
	}
	if done.After(r.lastDone) {
		r.lastDone = done
	}
}

// errorClass maps the client's error messages (see client.exchange) to a
// few stable words, so summaries can count them without unbounded keys.
func errorClass(msg string) string {
	switch {
	case msg == incomplete:
		return "incomplete"
	case strings.Contains(msg, "timeout"):
		return "timeout"
	case strings.HasPrefix(msg, "connect "):
		return "connect"
	case strings.HasPrefix(msg, "status "):
		return "status"
	case strings.HasPrefix(msg, "echo mismatch"):
		return "echo"
	case strings.HasPrefix(msg, "write "):
		return "write"
	case strings.HasPrefix(msg, "read "), strings.HasPrefix(msg, "server sent"):
		return "read"
	default:
		return "other"
	}
}

const incomplete = "incomplete: not answered before the drain ended"

// RunRate runs the open loop and returns its summary. The error is non-nil
// only for an invalid cfg or when ctx ends early; then the result holds
// what was measured so far.
//
// Scheduling and coordinated omission. Request i (from 0, warm-up
// included) has the intended start t0 + i/Rate and goes to connection
// i mod Connections; a connection sends its next request at its intended
// start, or at once if it is already late because the previous response
// took long. Its latency is recorded from the intended start, not from
// when it was actually sent. That is wrk2's correction, done the way
// wrk2 does it (it computes each request's expected start from the
// thread's start and the per-connection throughput and records
// now − expected start): a closed-loop client that waits for a slow
// response before sending the next request silently stops sending while
// the target is stalled, so the requests that real users would have made
// in that time — and their long waits — never enter the histogram
// (Gil Tene's "coordinated omission"). Measuring from the schedule puts
// them back: a 200 ms stall at 1000 requests/s shows as about 200 requests
// with latencies from 200 ms down to 0, not as one slow request. The
// service time (from the actual send) is recorded too, so the two can be
// compared; it is what the uncorrected tools report.
func RunRate(ctx context.Context, cfg RateConfig) (*RateResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	conns := make([]*client, cfg.Connections)
	for i := range conns {
		c, err := newClient(cfg.seq())
		if err != nil {
			return nil, err
		}
		conns[i] = c
	}
	// The schedule in nanoseconds as a float: exact to well below a
	// nanosecond for any count a run can reach.
	interval := float64(time.Second) / cfg.Rate
	total := int64(math.Ceil((cfg.Warmup + cfg.Duration).Seconds() * cfg.Rate))
	first := int64(math.Ceil(cfg.Warmup.Seconds() * cfg.Rate))
	if first > total {
		first = total
	}
	rec := &recorder{latency: newHist(), service: newHist(), lag: newHist(), classes: map[string]int64{}}

	// rctx ends when the drain does (below), or with ctx.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Each connection waits for its requests' intended starts on a kernel
	// timer: a Go timer wakes up to a millisecond late while the generator
	// is idle (internal/hrtimer), which would send requests in bursts and
	// count the generator's lateness as the target's latency.
	timers := make([]*hrtimer.Timer, len(conns))
	for i := range timers {
		tm, err := hrtimer.New(rctx)
		if err != nil {
			return nil, fmt.Errorf("rate: pacing timer: %w", err)
		}
		timers[i] = tm
		defer tm.Close()
	}

	t0 := time.Now()
	windowStart := t0.Add(cfg.Warmup)
	lastIntended := t0.Add(time.Duration(float64(max(total-1, 0)) * interval))
	// Cancelling rctx after the drain unblocks requests still in flight
	// (the client arms a deadline on cancel).
	drainEnd := time.AfterFunc(time.Until(lastIntended.Add(cfg.Drain)), cancel)
	defer drainEnd.Stop()

	if cfg.Interval > 0 && cfg.OnInterval != nil {
		rec.slice = newHist()
	}
	var wg sync.WaitGroup
	stopSlices := make(chan struct{})
	var sliceWG sync.WaitGroup
	if rec.slice != nil {
		// Slices are cut on a schedule from the window's start, not by
		// a ticker, so they do not drift over a long run.
		sliceWG.Go(func() {
			timer := time.NewTimer(time.Until(windowStart))
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-stopSlices:
				return
			}
			for k := 1; ; k++ {
				end := windowStart.Add(time.Duration(k) * cfg.Interval)
				timer.Reset(time.Until(end))
				select {
				case <-timer.C:
					cfg.OnInterval(rec.cut((time.Duration(k-1) * cfg.Interval).Seconds(), (time.Duration(k) * cfg.Interval).Seconds()))
				case <-stopSlices:
					if now := time.Since(windowStart); now > time.Duration(k-1)*cfg.Interval {
						cfg.OnInterval(rec.cut((time.Duration(k-1) * cfg.Interval).Seconds(), now.Seconds()))
					}
					return
				}
			}
		})
	}
	for ci, c := range conns {
		wg.Go(func() {
			defer c.close()
			payload := make([]byte, cfg.Payload)
			for i := int64(ci); i < total; i += int64(len(conns)) {
				intended := t0.Add(time.Duration(float64(i) * interval))
				measured := i >= first
				// An error here is the end of rctx, handled below.
				_ = timers[ci].Wait(intended)
				if ctx.Err() != nil {
					return
				}
				if rctx.Err() != nil {
					if measured {
						rec.fail(intended, time.Now(), incomplete, false)
					}
					continue
				}
				FillPayload(payload, ci+1, int(i))
				var s Sample
				sent := time.Now()
				c.do(rctx, payload, &s)
				done := time.Now()
				if !measured {
					continue
				}
				switch {
				case ctx.Err() != nil:
					// Cut short by the caller: not a measurement.
				case s.Err != "" && rctx.Err() != nil:
					rec.fail(intended, done, incomplete, true)
				case s.Err != "":
					rec.fail(intended, done, s.Err, true)
				default:
					rec.ok(intended, sent, done, s.Total)
				}
			}
		})
	}
	wg.Wait()
	close(stopSlices)
	sliceWG.Wait()

	r := &RateResult{
		URL: cfg.URL, Method: cfg.Method, Payload: cfg.Payload, Connections: cfg.Connections,
		TargetRate: cfg.Rate, WarmupSec: cfg.Warmup.Seconds(), DurationSec: cfg.Duration.Seconds(),
		Scheduled: total - first, Count: rec.count, Errors: rec.errors, Unsent: rec.unsent, FirstError: rec.firstErr,
		latency: rec.latency, service: rec.service,
		Latency: percentilesOf(rec.latency), ServiceTime: percentilesOf(rec.service),
		SendLag: percentilesOf(rec.lag),
	}
	// Encoding a histogram built here fails only on a bug; the result then
	// lacks it and MergeLatency names the gap.
	if enc, err := rec.latency.Encode(hdrhistogram.V2CompressedEncodingCookieBase); err == nil {
		r.LatencyHistogram = string(enc)
	}
	if len(rec.classes) > 0 {
		r.ErrorClasses = rec.classes
	}
	elapsed := max(rec.lastDone.Sub(windowStart), cfg.Duration)
	r.ElapsedSec = elapsed.Seconds()
	r.AnsweredRate = math.Round(float64(r.Count)/elapsed.Seconds()*100) / 100
	r.AchievedRate = math.Round(float64(r.Count+r.Errors)/elapsed.Seconds()*100) / 100
	return r, ctx.Err()
}

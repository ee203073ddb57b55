package load

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults used where SeqConfig leaves a field zero.
const (
	DefaultURL             = "http://127.0.0.1:8080/"
	DefaultConnectTimeout  = 5 * time.Second
	DefaultResponseTimeout = 60 * time.Second
	// MaxPayload bounds SeqConfig.Payload: each thread holds one payload
	// in memory.
	MaxPayload = 1 << 30
)

// SeqConfig describes a JMeter-like closed loop: Threads threads, each
// sending Requests requests one after the other, waiting for each response
// (and ThinkTime) before the next. The zero value sends one GET to
// DefaultURL over keep-alive.
type SeqConfig struct {
	// URL is the target, http only. Empty means DefaultURL.
	URL string
	// Method is the HTTP method; empty means POST when Payload > 0 and GET
	// otherwise.
	Method string
	// Payload is the exact request body size in bytes. Bodies are
	// pseudo-random and differ per request (see FillPayload).
	Payload int
	// Requests is the number of measured requests per thread; zero means 1.
	Requests int
	// Duration, when set, keeps each thread sending measured requests until
	// Duration has passed since its first one, Requests being the least it
	// sends: one setting gives thousands of samples on a fast path and
	// still a useful number on a slow one.
	Duration time.Duration
	// Threads is the number of concurrent threads; zero means 1.
	Threads int
	// Warmup is the number of requests each thread sends before the
	// measured ones and does not record. With keep-alive, the measured
	// requests then reuse the warm connection.
	Warmup int
	// DisableKeepAlive sends "Connection: close" and connects anew for
	// every request; by default a thread keeps one connection open, as
	// JMeter does with "use KeepAlive".
	DisableKeepAlive bool
	// ThinkTime is the pause between a response and the thread's next
	// request.
	ThinkTime time.Duration
	// ConnectTimeout bounds establishing a connection; zero means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the exchange after connecting, from writing
	// the request to the last body byte; zero means
	// DefaultResponseTimeout.
	ResponseTimeout time.Duration
	// VerifyEcho compares each response body byte for byte with the
	// request body; a difference makes the sample an error.
	VerifyEcho bool
	// OnSample, if set, receives each sample as soon as it is complete,
	// from one goroutine at a time, in completion order.
	OnSample func(Sample)
}

// Validate reports the first invalid field.
func (c SeqConfig) Validate() error {
	if c.URL != "" {
		if _, err := parseURL(c.URL); err != nil {
			return err
		}
	}
	if c.Method != "" && !validToken(c.Method) {
		return fmt.Errorf("method %q: not an HTTP method token", c.Method)
	}
	if c.Payload < 0 || c.Payload > MaxPayload {
		return fmt.Errorf("payload %d: must be between 0 and %d bytes", c.Payload, MaxPayload)
	}
	if c.Requests < 0 {
		return fmt.Errorf("requests %d: must not be negative", c.Requests)
	}
	if c.Threads < 0 {
		return fmt.Errorf("threads %d: must not be negative", c.Threads)
	}
	if c.Warmup < 0 {
		return fmt.Errorf("warmup %d: must not be negative", c.Warmup)
	}
	if c.Duration < 0 {
		return fmt.Errorf("duration %v: must not be negative", c.Duration)
	}
	if c.ThinkTime < 0 {
		return fmt.Errorf("think time %v: must not be negative", c.ThinkTime)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("connect timeout %v: must not be negative", c.ConnectTimeout)
	}
	if c.ResponseTimeout < 0 {
		return fmt.Errorf("response timeout %v: must not be negative", c.ResponseTimeout)
	}
	return nil
}

func parseURL(s string) (*url.URL, error) {
	if s == "" {
		s = DefaultURL
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("url %q: %w", s, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("url %q: scheme must be http", s)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("url %q: no host", s)
	}
	if u.User != nil {
		return nil, fmt.Errorf("url %q: user information is not supported", s)
	}
	return u, nil
}

func validToken(s string) bool {
	for _, r := range s {
		if r <= ' ' || r >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, r) {
			return false
		}
	}
	return s != ""
}

func (c SeqConfig) method() string {
	switch {
	case c.Method != "":
		return c.Method
	case c.Payload > 0:
		return "POST"
	default:
		return "GET"
	}
}

func (c SeqConfig) connectTimeout() time.Duration {
	if c.ConnectTimeout == 0 {
		return DefaultConnectTimeout
	}
	return c.ConnectTimeout
}

func (c SeqConfig) responseTimeout() time.Duration {
	if c.ResponseTimeout == 0 {
		return DefaultResponseTimeout
	}
	return c.ResponseTimeout
}

// RunSeq runs the closed loop and returns every measured request, sorted by
// thread and seq. Failed requests are samples with Err set; the loop goes
// on after them. The error is non-nil only for an invalid cfg or when ctx
// ends early; then the samples completed so far come with it, and the
// request cut short is not among them.
func RunSeq(ctx context.Context, cfg SeqConfig) ([]Sample, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	threads, requests := max(cfg.Threads, 1), max(cfg.Requests, 1)
	var (
		mu      sync.Mutex
		samples = make([]Sample, 0, threads*requests)
		wg      sync.WaitGroup
	)
	emit := func(s Sample) {
		mu.Lock()
		defer mu.Unlock()
		samples = append(samples, s)
		if cfg.OnSample != nil {
			cfg.OnSample(s)
		}
	}
	for t := 1; t <= threads; t++ {
		c, err := newClient(cfg)
		if err != nil {
			return nil, err
		}
		wg.Go(func() { runThread(ctx, cfg, c, t, requests, emit) })
	}
	wg.Wait()
	slices.SortFunc(samples, func(a, b Sample) int {
		if a.Thread != b.Thread {
			return a.Thread - b.Thread
		}
		return a.Seq - b.Seq
	})
	if err := ctx.Err(); err != nil {
		return samples, err
	}
	return samples, nil
}

func runThread(ctx context.Context, cfg SeqConfig, c *client, thread, requests int, emit func(Sample)) {
	defer c.close()
	payload := make([]byte, cfg.Payload)
	var think *time.Timer
	var first time.Time // of the first measured request
	for seq := 1 - cfg.Warmup; seq <= requests || cfg.Duration > 0 && time.Since(first) < cfg.Duration; seq++ {
		if seq > 1-cfg.Warmup && cfg.ThinkTime > 0 {
			if think == nil {
				think = time.NewTimer(cfg.ThinkTime)
			} else {
				think.Reset(cfg.ThinkTime)
			}
			select {
			case <-ctx.Done():
				return
			case <-think.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		FillPayload(payload, thread, seq)
		if seq == 1 {
			first = time.Now()
		}
		s := Sample{Thread: thread, Seq: seq}
		c.do(ctx, payload, &s)
		if ctx.Err() != nil {
			// Cut short by the caller, not by the network: not a
			// measurement.
			return
		}
		if seq >= 1 {
			emit(s)
		}
	}
}

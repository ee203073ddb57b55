// Package hostnoise measures how late this host runs a thread that asks to
// wake at fixed times on each CPU.
//
// Every process on a lab path sleeps between requests and must be woken to
// pass the next one on. When the host holds a CPU for milliseconds (a
// kernel thread that does not yield, the hypervisor running another guest,
// a burst of softirq work), the threads due there wait, requests queue
// behind them, and a tail percentile shows it: the more processes a path
// has, the more of these stalls land on it (README, "Keep-alive
// request/response"). One probe thread per CPU, pinned to it, sleeps until
// each tick on an absolute CLOCK_MONOTONIC deadline and records how late it
// ran; the count of wake-ups later than a threshold tells a quiet host from
// a noisy one before its figures are trusted.
package hostnoise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"
)

// Config is one measurement. Zero fields take the defaults.
type Config struct {
	// Interval between a probe's wake-ups (default 1 ms).
	Interval time.Duration
	// Duration of the measurement (default 10 s).
	Duration time.Duration
	// Late is how late a wake-up must be to count (default 1 ms).
	Late time.Duration
	// CPUs to probe (default: every CPU this process may run on).
	CPUs []int
}

// What a zero Config field means, and the least interval.
const (
	DefaultInterval = time.Millisecond
	DefaultDuration = 10 * time.Second
	DefaultLate     = time.Millisecond
	MinInterval     = 100 * time.Microsecond
)

func (c Config) withDefaults() (Config, error) {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Late == 0 {
		c.Late = DefaultLate
	}
	switch {
	case c.Interval < MinInterval:
		return c, fmt.Errorf("interval %v: must be at least %v (the probes would take the CPUs they measure)", c.Interval, MinInterval)
	case c.Duration < c.Interval:
		return c, fmt.Errorf("duration %v: must be at least one interval (%v)", c.Duration, c.Interval)
	case c.Late <= 0:
		return c, fmt.Errorf("late %v: must be positive", c.Late)
	}
	return c, nil
}

// CPU is what one CPU's probe saw.
type CPU struct {
	CPU     int           `json:"cpu"`
	Wakeups int           `json:"wakeups"`
	Late    int           `json:"late"`       // wake-ups later than Config.Late
	Worst   time.Duration `json:"worst_ns"`   // the latest wake-up
	Lost    time.Duration `json:"lost_ns"`    // sum of the late wake-ups' lateness
	Elapsed time.Duration `json:"elapsed_ns"` // how long the probe ran
}

// LatePerSecond is the rate of late wake-ups.
func (c CPU) LatePerSecond() float64 {
	if c.Elapsed <= 0 {
		return 0
	}
	return float64(c.Late) / c.Elapsed.Seconds()
}

// Result is one measurement: a CPU per probe, by CPU number.
type Result struct {
	Interval time.Duration `json:"interval_ns"`
	Late     time.Duration `json:"late_ns"`
	CPUs     []CPU         `json:"cpus"`
}

// Measure runs a probe on each CPU for cfg.Duration, or until ctx ends
// (then it returns what was measured and ctx's error).
func Measure(ctx context.Context, cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return Result{}, err
	}
	cpus := cfg.CPUs
	if len(cpus) == 0 {
		cpus = allowed
	}
	seen := map[int]bool{}
	for _, c := range cpus {
		switch {
		case !slices.Contains(allowed, c):
			return Result{}, fmt.Errorf("cpu %d: not one this process may run on (%v)", c, allowed)
		case seen[c]:
			return Result{}, fmt.Errorf("cpu %d: given twice", c)
		}
		seen[c] = true
	}
	res := Result{Interval: cfg.Interval, Late: cfg.Late, CPUs: make([]CPU, len(cpus))}
	errs := make([]error, len(cpus))
	var wg sync.WaitGroup
	for i, c := range cpus {
		wg.Go(func() { res.CPUs[i], errs[i] = probe(ctx, cfg, c) })
	}
	wg.Wait()
	sort.Slice(res.CPUs, func(a, b int) bool { return res.CPUs[a].CPU < res.CPUs[b].CPU })
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	return res, ctx.Err()
}

// probe runs on its own thread, pinned to cpu. The thread is not given
// back to the runtime (no UnlockOSThread): it ends with the goroutine, so
// no other goroutine inherits its affinity.
func probe(ctx context.Context, cfg Config, cpu int) (CPU, error) {
	runtime.LockOSThread()
	r := CPU{CPU: cpu}
	if err := pin(cpu); err != nil {
		return r, fmt.Errorf("cpu %d: %w", cpu, err)
	}
	start := monotonic()
	end := start + cfg.Duration
	next := start
	for ctx.Err() == nil {
		next += cfg.Interval
		if next > end {
			break
		}
		if err := sleepUntil(next); err != nil {
			return r, fmt.Errorf("cpu %d: %w", cpu, err)
		}
		now := monotonic()
		late := now - next
		r.Wakeups++
		if late > cfg.Late {
			r.Late++
			r.Lost += late
		}
		r.Worst = max(r.Worst, late)
		if late > cfg.Interval {
			// The ticks missed meanwhile are one stall, not a burst of
			// late wake-ups to catch up.
			next = now
		}
	}
	r.Elapsed = monotonic() - start
	return r, nil
}

// Table prints one row per CPU.
func (r Result) Table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "cpu\twake-ups\tlate > %v\tlate/s\tworst ms\tlost ms\n", r.Late)
	for _, c := range r.CPUs {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.1f\t%.3f\t%.1f\n", c.CPU, c.Wakeups, c.Late, c.LatePerSecond(),
			float64(c.Worst)/1e6, float64(c.Lost)/1e6)
	}
	return tw.Flush()
}

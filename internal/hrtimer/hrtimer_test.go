package hrtimer

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func newTimer(t testing.TB, ctx context.Context) *Timer {
	t.Helper()
	tm, err := New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tm.Close() })
	return tm
}

func TestWaitEndsAtTheDeadlineNotBefore(t *testing.T) {
	tm := newTimer(t, context.Background())
	for _, d := range []time.Duration{time.Microsecond, 50 * time.Microsecond, 2 * time.Millisecond} {
		deadline := time.Now().Add(d)
		if err := tm.Wait(deadline); err != nil {
			t.Fatalf("wait %v: %v", d, err)
		}
		if now := time.Now(); now.Before(deadline) {
			t.Errorf("wait %v returned %v before its deadline", d, deadline.Sub(now))
		}
	}
}

func TestWaitForAPastDeadlineReturnsAtOnce(t *testing.T) {
	tm := newTimer(t, context.Background())
	if err := tm.Wait(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestCancelEndsAWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tm := newTimer(t, ctx)
	done := make(chan error, 1)
	go func() { done <- tm.Wait(time.Now().Add(time.Hour)) }()
	time.Sleep(10 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait after cancel: %v, want context.Canceled", err)
	}
	if err := tm.Wait(time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait on a cancelled timer: %v, want context.Canceled", err)
	}
}

func TestCloseEndsAWait(t *testing.T) {
	tm, err := New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tm.Wait(time.Now().Add(time.Hour)) }()
	time.Sleep(10 * time.Millisecond)
	tm.Close()
	if err := <-done; err == nil {
		t.Fatal("wait on a closed timer returned nil")
	}
	if err := tm.Wait(time.Now().Add(time.Hour)); err == nil {
		t.Fatal("wait after close returned nil")
	}
}

func TestWaitAllocatesNothing(t *testing.T) {
	tm := newTimer(t, context.Background())
	allocs := testing.AllocsPerRun(100, func() {
		if err := tm.Wait(time.Now().Add(time.Microsecond)); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per wait, want 0", allocs)
	}
}

// BenchmarkLateness waits 100 µs at a time, as seed 002's rate cell paces
// each request, with a Timer and with a Go timer in the same run, and
// reports how late each woke (median and p99, µs). On an otherwise idle
// process the Go timer wakes up to a millisecond late.
func BenchmarkLateness(b *testing.B) {
	const gap = 100 * time.Microsecond
	run := func(b *testing.B, wait func(time.Time)) {
		late := make([]time.Duration, 0, b.N)
		for b.Loop() {
			deadline := time.Now().Add(gap)
			wait(deadline)
			late = append(late, time.Since(deadline))
		}
		slices.Sort(late)
		b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-late-µs")
		b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-late-µs")
	}
	b.Run("hrtimer", func(b *testing.B) {
		tm := newTimer(b, context.Background())
		run(b, func(d time.Time) { tm.Wait(d) })
	})
	b.Run("go-timer", func(b *testing.B) {
		timer := time.NewTimer(time.Hour)
		run(b, func(d time.Time) { timer.Reset(time.Until(d)); <-timer.C })
	})
}

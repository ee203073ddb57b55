package procs

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGovernor(t *testing.T) {
	cfg := Config{Max: 4, Up: 0.7, Down: 0.35, UpAfter: 3, DownAfter: 2}
	g := governor{cfg: cfg, procs: 1}
	steps := []struct {
		use  float64
		want int
	}{
		{0.9, 1}, {0.9, 1}, {0.5, 1}, // a burst broken before UpAfter
		{0.8, 1}, {0.7, 1}, {0.95, 4}, // three in a row
		{0.5, 4}, {0.3, 4}, {0.5, 4}, // between the thresholds: stays
		{0.2, 4}, {0.1, 1}, // two below Down
		{0.1, 1},
	}
	prev := 1
	for i, s := range steps {
		got, changed := g.observe(s.use)
		if got != s.want {
			t.Fatalf("step %d (use %.2f): %d Ps, want %d", i, s.use, got, s.want)
		}
		if changed != (got != prev) {
			t.Fatalf("step %d: changed=%v from %d to %d", i, changed, prev, got)
		}
		prev = got
	}
}

// fakeProcess is a CPU clock the test advances and a GOMAXPROCS it records.
type fakeProcess struct {
	cpu   atomic.Int64
	mu    sync.Mutex
	procs []int
}

func (f *fakeProcess) set(n int) { f.mu.Lock(); f.procs = append(f.procs, n); f.mu.Unlock() }

func (f *fakeProcess) last() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.procs) == 0 {
		return 0
	}
	return f.procs[len(f.procs)-1]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestAdaptFollowsLoad(t *testing.T) {
	f := &fakeProcess{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var busy atomic.Bool
	cfg := Config{Max: 3, Interval: 5 * time.Millisecond, UpAfter: 2, DownAfter: 2,
		cpuTime: func() time.Duration {
			return time.Duration(f.cpu.Load())
		}, setProcs: f.set}
	// The clock advances by 2 CPUs' worth of wall time while busy.
	go func() {
		last := time.Now()
		for ctx.Err() == nil {
			time.Sleep(time.Millisecond)
			now := time.Now()
			if busy.Load() {
				f.cpu.Add(int64(2 * now.Sub(last)))
			}
			last = now
		}
	}()
	go func() { Adapt(ctx, cfg); close(done) }()
	waitFor(t, "one P at start", func() bool { return f.last() == 1 })
	busy.Store(true)
	waitFor(t, "all Ps under load", func() bool { return f.last() == 3 })
	busy.Store(false)
	waitFor(t, "one P when idle again", func() bool { return f.last() == 1 })
	cancel()
	<-done
	if f.last() != 3 {
		t.Errorf("after Adapt returned: %d Ps, want Max (3)", f.last())
	}
}

// TestAdaptRealProcess runs Adapt on this process: goroutines that burn CPU
// get every P, and an idle process gets one.
func TestAdaptRealProcess(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// Up at 0.3 CPU: the burners reach that on one P even on a busy host,
	// while an idle process stays far below Down (0.15).
	go func() {
		Adapt(ctx, Config{Max: 2, Interval: 10 * time.Millisecond, Up: 0.3, Down: 0.15, DownAfter: 3})
		close(done)
	}()
	waitFor(t, "one P at start", func() bool { return runtime.GOMAXPROCS(0) == 1 })
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
			}
		})
	}
	waitFor(t, "two Ps under load", func() bool { return runtime.GOMAXPROCS(0) == 2 })
	stop.Store(true)
	wg.Wait()
	waitFor(t, "one P when idle", func() bool { return runtime.GOMAXPROCS(0) == 1 })
	cancel()
	<-done
	if n := runtime.GOMAXPROCS(0); n != 2 {
		t.Errorf("after Adapt returned: %d Ps, want 2", n)
	}
}

func TestNothingToAdaptOnOneCPU(t *testing.T) {
	f := &fakeProcess{}
	Adapt(context.Background(), Config{Max: 1, cpuTime: func() time.Duration { return 0 }, setProcs: f.set})
	if len(f.procs) != 0 {
		t.Fatalf("Adapt with Max 1 set GOMAXPROCS to %v", f.procs)
	}
}

// TestBoost: a Boost holds Max Ps over Adapt's choice of one until its last
// holder releases it, a second release of one holder changes nothing, and
// without Adapt running a Boost sets nothing.
func TestBoost(t *testing.T) {
	f := &fakeProcess{}
	release := Boost()
	release()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// An idle clock: Adapt's own choice stays one P.
	go func() {
		Adapt(ctx, Config{Max: 3, Interval: time.Millisecond, cpuTime: func() time.Duration { return 0 }, setProcs: f.set})
		close(done)
	}()
	waitFor(t, "one P at start", func() bool { return f.last() == 1 })
	first, second := Boost(), Boost()
	if f.last() != 3 {
		t.Fatalf("boosted: %v, want 3 Ps last", f.procs)
	}
	first()
	first()
	if f.last() != 3 {
		t.Fatalf("one of two boosts released (twice): %v, want 3 Ps last", f.procs)
	}
	second()
	if f.last() != 1 {
		t.Fatalf("both boosts released: %v, want 1 P last", f.procs)
	}
	cancel()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []int{1, 3, 1, 3}; !slices.Equal(f.procs, want) {
		t.Errorf("GOMAXPROCS set to %v, want %v (the Boost before Adapt setting nothing)", f.procs, want)
	}
}

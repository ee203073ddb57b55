// Package procs runs a process's Go code on one P (GOMAXPROCS=1) while its
// load fits in one CPU, and on all its CPUs when it does not.
//
// With more than one P, every goroutine the runtime's poller wakes while a
// P is idle makes the runtime wake a second thread to run it, usually on
// the other CPU: a futex wake, an inter-processor interrupt and a thread
// that spins, finds little and sleeps again. A gateway relaying one small
// request at a time pays that on every packet. At seed 002's rate cell
// (10 000 requests/s of 1 KB; README "Performance") each gateway used
// 0.44 s of CPU per 10 000 requests with two Ps and 0.38 s with one, and a
// single bulk stream moved as much with one P as with two (1.63 and
// 1.67 Gbit/s). Above the threshold the process gets every P back, so a
// process that has more to do than one CPU can carry still uses them all.
// A burst shorter than the intervals it takes to scale up would run on the
// one P, ahead of everything else the process does, until the runtime
// preempts it: on a gateway an apply of 1 200 imports held keep-alive
// traffic for 16–69 ms. Work known to come in such bursts (a gateway's
// applies) takes every P for its duration with Boost.
package procs

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"time"
)

// Defaults used where Config leaves a field zero.
const (
	DefaultInterval = 100 * time.Millisecond
	// DefaultUp is the CPU use, in CPUs, above which a process on one P
	// gets all of them: well below 1, so that it scales before its one P
	// is a queue.
	DefaultUp = 0.7
	// DefaultUpAfter is how many intervals in a row above DefaultUp it
	// takes: a burst shorter than that stays on one P.
	DefaultUpAfter = 3
	// DefaultDown is the CPU use below which a process on all Ps goes
	// back to one: half of DefaultUp, so that a load between the two
	// does not flap.
	DefaultDown = 0.35
	// DefaultDownAfter is how many intervals in a row below DefaultDown
	// it takes.
	DefaultDownAfter = 20
)

// Config tunes Adapt. The zero value uses the defaults above.
type Config struct {
	// Max is the number of Ps under load; 0 means GOMAXPROCS when Adapt
	// starts (Go's default: the CPUs the process may use, its cgroup's
	// limit included).
	Max       int
	Interval  time.Duration
	Up, Down  float64
	UpAfter   int
	DownAfter int
	// Logger receives each change at debug level; nil discards them.
	Logger *slog.Logger

	// cpuTime and setProcs replace the process's CPU clock and
	// runtime.GOMAXPROCS in tests.
	cpuTime  func() time.Duration
	setProcs func(int)
}

func (c Config) withDefaults() Config {
	if c.Max <= 0 {
		c.Max = runtime.GOMAXPROCS(0)
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Up <= 0 {
		c.Up = DefaultUp
	}
	if c.Down <= 0 {
		c.Down = DefaultDown
	}
	if c.UpAfter <= 0 {
		c.UpAfter = DefaultUpAfter
	}
	if c.DownAfter <= 0 {
		c.DownAfter = DefaultDownAfter
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.cpuTime == nil {
		c.cpuTime = processCPUTime
	}
	if c.setProcs == nil {
		c.setProcs = func(n int) { runtime.GOMAXPROCS(n) }
	}
	return c
}

// Adapt sets GOMAXPROCS to 1 and then, every interval, to Max or back to 1
// as the process's CPU use asks, until ctx ends; it then leaves Max. On a
// single CPU, or where the process's CPU time cannot be read, it does
// nothing. A process runs one Adapt at a time.
func Adapt(ctx context.Context, cfg Config) {
	cfg = cfg.withDefaults()
	if cfg.Max <= 1 || cfg.cpuTime() < 0 {
		return
	}
	g := governor{cfg: cfg, procs: 1}
	state.start(cfg.Max, cfg.setProcs)
	defer state.stop()
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	lastCPU, lastWall := cfg.cpuTime(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// The tick may run late; the use is over the time that
			// really passed.
			cpu, now := cfg.cpuTime(), time.Now()
			use := float64(cpu-lastCPU) / float64(now.Sub(lastWall))
			lastCPU, lastWall = cpu, now
			if n, changed := g.observe(use); changed {
				state.choose(n)
				cfg.Logger.Debug("GOMAXPROCS", "procs", n, "cpu_use", use)
			}
		}
	}
}

// governor decides the number of Ps from the CPU use of each interval.
type governor struct {
	cfg       Config
	procs     int
	hot, cold int
}

// observe takes one interval's CPU use, in CPUs, and returns the number of
// Ps and whether that changed.
func (g *governor) observe(use float64) (int, bool) {
	if g.procs == 1 {
		g.hot = countRun(g.hot, use >= g.cfg.Up)
		if g.hot >= g.cfg.UpAfter {
			g.procs, g.hot = g.cfg.Max, 0
			return g.procs, true
		}
		return g.procs, false
	}
	g.cold = countRun(g.cold, use < g.cfg.Down)
	if g.cold >= g.cfg.DownAfter {
		g.procs, g.cold = 1, 0
		return g.procs, true
	}
	return g.procs, false
}

func countRun(n int, hit bool) int {
	if hit {
		return n + 1
	}
	return 0
}

// Boost gives the process Max Ps until release is called, whatever Adapt
// chose: for a burst of work that would otherwise hold the only P (and the
// goroutines the poller woke meanwhile wait until the runtime preempts it,
// up to 10 ms at a time). Changing GOMAXPROCS stops the world for tens of
// microseconds, so it is for work that takes longer than that. Without
// Adapt running it does nothing. Calls of release after the first do
// nothing.
func Boost() (release func()) {
	state.boost(1)
	var once sync.Once
	return func() { once.Do(func() { state.boost(-1) }) }
}

// state is what Adapt chose and how many Boosts hold the process at Max.
var state adaptState

type adaptState struct {
	mu      sync.Mutex
	running bool
	max     int
	set     func(int)
	chosen  int // Adapt's choice
	boosts  int
	applied int // what set was last given
}

func (a *adaptState) start(max int, set func(int)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.running, a.max, a.set, a.chosen, a.applied = true, max, set, 1, 0
	a.applyLocked()
}

// stop leaves the process at max.
func (a *adaptState) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.chosen = a.max
	a.applyLocked()
	a.running = false
}

func (a *adaptState) choose(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.chosen = n
	a.applyLocked()
}

func (a *adaptState) boost(d int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.boosts += d
	if a.running {
		a.applyLocked()
	}
}

func (a *adaptState) applyLocked() {
	n := a.chosen
	if a.boosts > 0 {
		n = a.max
	}
	if n != a.applied {
		a.set(n)
		a.applied = n
	}
}

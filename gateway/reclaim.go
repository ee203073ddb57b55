package gateway

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"syscall"
	"time"

	"github.com/strait-net/strait/internal/usage"
)

// Returning memory after a burst (README, "Concurrency limits", "Memory
// after a burst").
//
// Once thousands of streams close, their buffers, goroutine stacks and
// connection state are garbage, but the Go runtime hands the pages back to
// the system only slowly: the heap goal stays at twice the burst's live
// heap until the next collection, which nothing triggers in a gateway that
// has gone quiet but the runtime's forced one every two minutes, and the
// background scavenger then releases what lies above 110 % of the new goal
// at about 1 % of a CPU. Measured (README, "Memory after a burst"): a
// minute after 10 000 streams closed, RSS stayed 2.7–3.3 times the start. A long-running daemon should
// look like it did before the burst, so the gateway reclaims once: when
// the connections it carries have stayed at most half their peak since the
// last reclaim for reclaimQuiet, it collects twice (the first collection
// moves sync.Pool'd copy buffers to the pools' victim caches, the second
// drops them) and returns every free page (debug.FreeOSMemory). The peak
// then restarts from what is carried, so a steady load never triggers it;
// reclaimMinGap bounds how often a load that bursts again and again pays
// for it.
//
// Imports are a second trigger of their own, the same rule on the import
// addresses served: deleting 20 000 imports left the gateway's RSS 34 %
// above what it was before they were applied a minute later (README,
// "Concurrency limits", bench-imports), their routes, listeners or steering
// entries and the apply's decoding garbage, which nothing collected.
// UDP datagrams a second are the third, for a flood. Separate triggers,
// so that thousands of steady imports do not hide a burst of connections
// (or the reverse) under a common peak.
const (
	reclaimTick   = time.Second
	reclaimQuiet  = 5 * time.Second
	reclaimMinGap = 30 * time.Second
	// ReclaimMinPeak: a peak below this many connections, or imports,
	// leaves too little behind to be worth two collections. Each trigger
	// keeps its own reclaimMinGap, so a burst of each may reclaim once.
	ReclaimMinPeak = 256
	// reclaimMinDatagramRate is the third trigger's least peak, in UDP
	// datagrams a second: a flood at an import leaves its datagrams'
	// garbage and a heap goal twice the flood's, with no connections or
	// imports to follow (README, "A UDP flood at one import": RSS +12 to
	// +19 % a minute after a flood before this trigger).
	reclaimMinDatagramRate = 10000
)

// reclaimTrigger decides, from the connections carried sampled over time,
// when a burst is over. It holds no clock of its own: step is given the
// time, so the decision is tested without waiting.
type reclaimTrigger struct {
	quiet, minGap time.Duration
	minPeak       int64

	peak       int64
	belowSince time.Time // zero: not below half the peak
	last       time.Time // the last reclaim (zero: none yet)
}

func newReclaimTrigger() *reclaimTrigger {
	return &reclaimTrigger{quiet: reclaimQuiet, minGap: reclaimMinGap, minPeak: ReclaimMinPeak}
}

// step records that active connections were carried at now and reports
// whether to reclaim; if it says so, the peak restarts from active.
func (t *reclaimTrigger) step(now time.Time, active int64) bool {
	t.peak = max(t.peak, active)
	if t.peak < t.minPeak || active*2 > t.peak {
		t.belowSince = time.Time{}
		return false
	}
	if t.belowSince.IsZero() {
		t.belowSince = now
	}
	if now.Sub(t.belowSince) < t.quiet || (!t.last.IsZero() && now.Sub(t.last) < t.minGap) {
		return false
	}
	t.last, t.peak, t.belowSince = now, active, time.Time{}
	return true
}

// reclaimed is what one reclaim did.
type reclaimed struct {
	peak                int64         // the connections' peak it followed
	rssBefore, rssAfter int64         // this process's resident memory (0: unknown)
	released            int64         // heap bytes the runtime returned to the system
	wall, cpu           time.Duration // its duration and this process's CPU time meanwhile
}

// reclaimMemory collects twice and returns every free page to the system.
func reclaimMemory() reclaimed {
	var r reclaimed
	pid := os.Getpid()
	r.rssBefore, _ = usage.RSS(pid)
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
	rtmetrics.Read(s)
	before := s[0].Value.Uint64()
	cpu0, start := processCPU(), time.Now()
	runtime.GC()
	debug.FreeOSMemory()
	r.wall, r.cpu = time.Since(start), processCPU()-cpu0
	rtmetrics.Read(s)
	if after := s[0].Value.Uint64(); after > before {
		r.released = int64(after - before)
	}
	r.rssAfter, _ = usage.RSS(pid)
	return r
}

// processCPU is this process's user and system CPU time so far: during a
// reclaim on a quiet gateway, nearly all of it is the collections'.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reclaimTriggers are the gateway's three triggers: connections carried,
// import addresses served, UDP datagrams carried a second.
type reclaimTriggers struct {
	conns, imps, dgrams *reclaimTrigger
	carried             uint64 // UDP datagrams carried so far, at the last step
	stepped             bool
}

// newReclaimTriggers makes the triggers of a gateway whose UDP flows end
// as udp configures. The datagrams' trigger waits for the burst's flows to
// end too (their idle timeout, and the sweep that ends them): a flood's
// flows hold their queues and sockets until then, and a reclaim before it
// left the gateway 12 % above its start a minute after (README, "A UDP
// flood at one import").
func newReclaimTriggers(udp UDPConfig) *reclaimTriggers {
	r := &reclaimTriggers{conns: newReclaimTrigger(), imps: newReclaimTrigger(), dgrams: newReclaimTrigger()}
	r.dgrams.minPeak = reclaimMinDatagramRate
	r.dgrams.quiet += udp.idleTimeout() + udp.sweepInterval()
	return r
}

// step takes one reclaimTick's sample: the connections carried, the
// import addresses served and the UDP datagrams carried so far. It
// returns what burst ended ("" for none: no reclaim), the peak of the
// first trigger that fired and what is carried now by its measure.
func (r *reclaimTriggers) step(now time.Time, conns, imports int64, carried uint64) (what string, peak, left int64) {
	var rate int64 // datagrams in the last tick, a second
	if r.stepped {
		rate = int64(carried - r.carried)
	}
	r.carried, r.stepped = carried, true
	var fired []string
	// All step every tick, so that each follows its own peak.
	for _, tr := range []struct {
		what string
		t    *reclaimTrigger
		now  int64
	}{{"connections", r.conns, conns}, {"imports", r.imps, imports}, {"UDP datagrams a second", r.dgrams, rate}} {
		p := tr.t.peak
		if tr.t.step(now, tr.now) {
			if len(fired) == 0 {
				peak, left = p, tr.t.peak // step restarted its peak from now
			}
			fired = append(fired, tr.what)
		}
	}
	return strings.Join(fired, " and "), peak, left
}

// reclaimLoop samples the connections carried, the imports served and the
// UDP datagrams carried every reclaimTick and reclaims once a burst of any
// is over, until ctx ends.
func (g *Gateway) reclaimLoop(ctx context.Context) {
	trs := newReclaimTriggers(g.cfg.UDP)
	tick := time.NewTicker(reclaimTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			g.mu.Lock()
			served := int64(len(g.listeners))
			g.mu.Unlock()
			what, peak, left := trs.step(now, g.limit.active.Load(), served, g.metrics.udp.carried())
			if what == "" {
				continue
			}
			r := reclaimMemory()
			r.peak = peak
			g.metrics.reclaimed(r)
			g.log.Info("memory returned after a burst of "+what, "peak", r.peak, "now", left,
				"rss-before", r.rssBefore, "rss-after", r.rssAfter, "released", r.released,
				"took", r.wall.Round(time.Microsecond).String(), "cpu", r.cpu.Round(time.Microsecond).String())
		}
	}
}

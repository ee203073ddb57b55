package run

import (
	"time"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/scenario"
)

// Fixed costs of a unit beside its measurements: building and removing the
// lab, and per tool its setup, health check and teardown. Rough: only the
// ratios between units matter.
const (
	unitOverhead = 2 * time.Second
	toolOverhead = 3 * time.Second
)

// unitCost estimates how long one unit of the scenario takes: the
// nominal length of every cell it measures through every tool (a rate
// cell's warm-up, window and drain, a stream cell's duration, iperf3's
// trials and pings, a soak), a round trip per closed-loop request (two
// on a new connection), and the fixed costs. Units of one experiment can
// differ several times over (seed002 streams only at lcl), so the ETA
// weighs finished units by it instead of counting them, and the longest
// units start first.
func (e *Experiment) unitCost(sc scenario.Scenario) time.Duration {
	rtt := e.roundTrips[sc.Name]
	var perTool time.Duration
	l := e.Load
	var think time.Duration
	if l.Think != "" {
		think, _ = emulation.ParseDuration(l.Think) // checked by Load.validate
	}
	var least time.Duration
	if l.Duration != "" {
		least, _ = emulation.ParseDuration(l.Duration)
	}
	for _, w := range e.Workloads {
		trips := time.Duration(1)
		if !w.keepAlive(l) {
			trips = 2
		}
		per := trips*rtt + think + time.Millisecond
		for _, size := range w.sizes {
			n := time.Duration((w.requestsFor(size, l) + l.Warmup + l.Threads - 1) / max(l.Threads, 1))
			perTool += max(n*per, least)
		}
	}
	if rt := e.Rate; rt != nil {
		perTool += time.Duration(len(rt.cells(sc.Name, ""))) * (rt.warmup + rt.duration + rtt)
	}
	if tp := e.Throughput; tp != nil {
		perTool += time.Duration(len(tp.cells(sc.Name, ""))*tp.Runs) * tp.duration
	}
	if ip := e.Iperf3; ip != nil {
		perTool += time.Duration(len(ip.Protocols)) * time.Duration(ip.seconds()) * time.Second
		if p := ip.Ping; p != nil {
			perTool += time.Duration(p.Count) * p.interval
		}
	}
	if s := e.Soak; s != nil {
		perTool += s.duration
	}
	return unitOverhead + time.Duration(len(e.Tools))*(perTool+toolOverhead)
}

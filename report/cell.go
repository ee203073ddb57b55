package report

import (
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/strait-net/strait/load"
)

// Times returns the response times of the successful samples in ms,
// sorted: what a cell's statistics and intervals are computed on.
func Times(samples []load.Sample) []float64 {
	var t []float64
	for _, s := range samples {
		if s.OK() {
			t = append(t, float64(s.Total.Microseconds())/1000)
		}
	}
	slices.Sort(t)
	return t
}

// CellIntervals are one cell's bootstrap intervals of the median and the
// IQR mean, with the replicates a ratio to another cell needs.
type CellIntervals struct {
	Median, IQRMean  Interval
	medReps, iqmReps []float64
}

// CellSeed gives every cell its own seed, derived from b's and the cell's
// name: a tool's and direct's resamples are then independent (as a ratio
// interval needs), and a cell's interval does not depend on which other
// cells the run has. The report and summary.json use the same names, so
// they agree.
func (b Bootstrap) CellSeed(scenario, tool, workload string, payload int) Bootstrap {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", scenario, tool, workload, payload)
	b.Seed ^= h.Sum64()
	return b
}

// Cell computes a cell's intervals from its sorted times (see Times).
// b must be valid (Validate).
func (b Bootstrap) Cell(times []float64) CellIntervals {
	reps := b.replicates(times, streamOne, []Statistic{Median, IQRMean})
	return CellIntervals{Median: b.Interval(reps[0]), IQRMean: b.Interval(reps[1]), medReps: reps[0], iqmReps: reps[1]}
}

// CellRatio returns the intervals of c's IQR mean and median relative to
// base's (e.g. a tool's to direct's in the same scenario, workload and
// payload).
func (b Bootstrap) CellRatio(c, base CellIntervals) (iqrMean, median Interval) {
	return b.RatioInterval(c.iqmReps, base.iqmReps), b.RatioInterval(c.medReps, base.medReps)
}

package report

import (
	"testing"
	"time"

	"github.com/strait-net/strait/load"
)

func TestCellIntervals(t *testing.T) {
	var samples []load.Sample
	for i := range 200 {
		samples = append(samples, load.Sample{Status: 200, Total: time.Duration(10_000+37*(i%50)) * time.Microsecond})
	}
	samples = append(samples, load.Sample{Err: "response timeout"})
	times := Times(samples)
	if len(times) != 200 || times[0] != 10 || times[199] != 10+37*49/1000.0 {
		t.Fatalf("times: %d values from %v to %v", len(times), times[0], times[len(times)-1])
	}
	var b Bootstrap
	a1 := b.CellSeed("lcl", "strait", "echo", 1000).Cell(times)
	a2 := b.CellSeed("lcl", "strait", "echo", 1000).Cell(times)
	d := b.CellSeed("lcl", "direct", "echo", 1000).Cell(times)
	if a1.IQRMean != a2.IQRMean || a1.Median != a2.Median {
		t.Error("the same cell bootstrapped twice gave different intervals")
	}
	if !a1.IQRMean.Contains(IQRMean(times)) || !a1.Median.Contains(Median(times)) {
		t.Errorf("intervals %+v, %+v miss the estimates %v, %v", a1.IQRMean, a1.Median, IQRMean(times), Median(times))
	}
	// Same values, independent resamples: the ratio's interval holds 1
	// and is not the degenerate [1, 1] that shared resamples would give.
	iqm, med := b.CellRatio(a1, d)
	if !iqm.Contains(1) || !med.Contains(1) || iqm.Lo == iqm.Hi {
		t.Errorf("ratio intervals %+v, %+v: want around 1, not degenerate", iqm, med)
	}
	if empty := b.CellSeed("x", "y", "z", 0).Cell(nil); empty.IQRMean.Valid() {
		t.Errorf("a cell without times has interval %+v", empty.IQRMean)
	}
}

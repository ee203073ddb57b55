// Package report turns a run's samples into the numbers the seed papers
// report (seed 001's IQR mean, medians, tail percentiles) and prints them.
package report

import (
	"math"
	"slices"
	"strconv"

	"github.com/strait-net/strait/load"
)

// Summary describes the response times (load.Sample.Total) of one run.
// Times are in milliseconds, rounded to the microsecond. Failed requests
// count in Count and Errors but not in the time statistics; when no request
// succeeded (OK is 0) every time field is 0.
type Summary struct {
	Count  int `json:"count"`
	Errors int `json:"errors"`
	OK     int `json:"ok"`
	// Quantiles follow Hyndman and Fan's type 7 (see Quantile).
	MinMS    float64 `json:"min_ms"`
	Q1MS     float64 `json:"q1_ms"`
	MedianMS float64 `json:"median_ms"`
	Q3MS     float64 `json:"q3_ms"`
	// IQRMeanMS is the mean of the times within [Q1, Q3] (see IQRMean).
	IQRMeanMS float64 `json:"iqr_mean_ms"`
	MeanMS    float64 `json:"mean_ms"`
	P90MS     float64 `json:"p90_ms"`
	P99MS     float64 `json:"p99_ms"`
	MaxMS     float64 `json:"max_ms"`
}

// Summarize computes the summary of samples' response times.
func Summarize(samples []load.Sample) Summary {
	s := Summary{Count: len(samples)}
	// Statistics are computed in whole microseconds, the samples'
	// precision, so interpolating halfway between two samples is exact
	// before rounding.
	us := make([]float64, 0, len(samples))
	for _, x := range samples {
		if !x.OK() {
			s.Errors++
			continue
		}
		us = append(us, float64(x.Total.Microseconds()))
	}
	s.OK = len(us)
	if len(us) == 0 {
		return s
	}
	slices.Sort(us)
	sum := 0.0
	for _, v := range us {
		sum += v
	}
	s.MinMS = usToMS(us[0])
	s.MaxMS = usToMS(us[len(us)-1])
	s.Q1MS = usToMS(Quantile(us, 0.25))
	s.MedianMS = usToMS(Quantile(us, 0.5))
	s.Q3MS = usToMS(Quantile(us, 0.75))
	s.P90MS = usToMS(Quantile(us, 0.90))
	s.P99MS = usToMS(Quantile(us, 0.99))
	s.IQRMeanMS = usToMS(IQRMean(us))
	s.MeanMS = usToMS(sum / float64(len(us)))
	return s
}

// usToMS rounds to whole microseconds (half away from zero) and converts.
func usToMS(us float64) float64 { return math.Round(us) / 1000 }

// Quantile returns the p-quantile (0 ≤ p ≤ 1) of sorted, by linear
// interpolation between order statistics: Hyndman and Fan's type 7, the
// default of R, NumPy and Excel's PERCENTILE.INC. With n values x[0..n-1]
// and h = (n-1)·p, it is x[⌊h⌋] + (h-⌊h⌋)·(x[⌊h⌋+1]-x[⌊h⌋]). It returns NaN
// for no values.
func Quantile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	p = min(max(p, 0), 1)
	h := float64(n-1) * p
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// IQRMean returns the interquartile mean as seed 001 reports it: the mean
// of the values x with Q1 ≤ x ≤ Q3, quartiles by Quantile. Ties at a
// quartile are all included. When no value lies within (possible only for
// two distinct values) it returns the median. It returns NaN for no
// values. sorted must be sorted.
func IQRMean(sorted []float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	q1, q3 := Quantile(sorted, 0.25), Quantile(sorted, 0.75)
	sum, n := 0.0, 0
	for _, v := range sorted {
		if v >= q1 && v <= q3 {
			sum += v
			n++
		}
	}
	if n == 0 {
		return Quantile(sorted, 0.5)
	}
	return sum / float64(n)
}

// SummaryHeader names the columns of Summary.Cells.
func SummaryHeader() []string {
	return []string{"count", "errors", "min_ms", "iqr_mean_ms", "median_ms", "p90_ms", "p99_ms", "max_ms"}
}

// Cells formats s for a Table row under SummaryHeader. With no successful
// request the time cells are "-".
func (s Summary) Cells() []string {
	cells := []string{strconv.Itoa(s.Count), strconv.Itoa(s.Errors)}
	for _, v := range []float64{s.MinMS, s.IQRMeanMS, s.MedianMS, s.P90MS, s.P99MS, s.MaxMS} {
		if s.OK == 0 {
			cells = append(cells, "-")
			continue
		}
		cells = append(cells, strconv.FormatFloat(v, 'f', 3, 64))
	}
	return cells
}

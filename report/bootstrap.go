package report

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// Interval is a confidence interval. Lo and Hi are NaN when it is undefined
// (no values, or a ratio whose denominator can be 0); JSON writes NaN as
// null, since JSON has no NaN.
type Interval struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// Valid reports whether both ends are numbers.
func (iv Interval) Valid() bool { return !math.IsNaN(iv.Lo) && !math.IsNaN(iv.Hi) }

// Contains reports whether Lo ≤ v ≤ Hi.
func (iv Interval) Contains(v float64) bool { return iv.Lo <= v && v <= iv.Hi }

// MarshalJSON writes {"lo":…,"hi":…}, with null for NaN (and ±Inf).
func (iv Interval) MarshalJSON() ([]byte, error) {
	num := func(v float64) any {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return v
	}
	return json.Marshal(struct {
		Lo any `json:"lo"`
		Hi any `json:"hi"`
	}{num(iv.Lo), num(iv.Hi)})
}

// UnmarshalJSON reads what MarshalJSON writes; null becomes NaN.
func (iv *Interval) UnmarshalJSON(b []byte) error {
	var v struct {
		Lo *float64 `json:"lo"`
		Hi *float64 `json:"hi"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	iv.Lo, iv.Hi = math.NaN(), math.NaN()
	if v.Lo != nil {
		iv.Lo = *v.Lo
	}
	if v.Hi != nil {
		iv.Hi = *v.Hi
	}
	return nil
}

// Statistic computes a number from sorted values, e.g. Median or IQRMean.
type Statistic func(sorted []float64) float64

// Median is the 0.5 quantile (type 7, see Quantile).
func Median(sorted []float64) float64 { return Quantile(sorted, 0.5) }

// DefaultResamples is the number of bootstrap resamples when
// Bootstrap.Resamples is 0.
const DefaultResamples = 2000

// Bootstrap computes percentile bootstrap confidence intervals: draw
// Resamples samples of the same size with replacement, compute the
// statistic on each, and take the (1-Level)/2 and (1+Level)/2 quantiles of
// those replicates. The zero value uses 2000 resamples, a 95 % level and
// seed 0. Results depend only on the values, the configuration and Seed, so
// a report computed twice is the same report.
type Bootstrap struct {
	// Resamples is the number of resamples B; 0 means DefaultResamples.
	Resamples int
	// Level is the confidence level in (0, 1); 0 means 0.95.
	Level float64
	// Seed seeds the random number generator.
	Seed uint64
}

// Validate checks the fields' ranges.
func (b Bootstrap) Validate() error {
	if b.Resamples < 0 || b.Resamples > 1_000_000 {
		return fmt.Errorf("bootstrap resamples %d: must be between 1 and 1000000 (0: %d)", b.Resamples, DefaultResamples)
	}
	if b.Level != 0 && !(b.Level > 0 && b.Level < 1) {
		return fmt.Errorf("bootstrap level %v: must be in (0, 1) (0: 0.95)", b.Level)
	}
	return nil
}

func (b Bootstrap) resamples() int {
	if b.Resamples == 0 {
		return DefaultResamples
	}
	return b.Resamples
}

func (b Bootstrap) level() float64 {
	if b.Level == 0 {
		return 0.95
	}
	return b.Level
}

// streams keep the numerator's and the denominator's resamples of a ratio
// independent although they share a Seed.
const (
	streamOne uint64 = 0x9e3779b97f4a7c15
	streamTwo uint64 = 0xbf58476d1ce4e5b9
)

// Replicates returns, for each statistic, its value on each of the
// Resamples bootstrap resamples of sample (out[i][r] is stats[i] on
// resample r). sample need not be sorted and is not modified. With no
// values every replicate is NaN.
func (b Bootstrap) Replicates(sample []float64, stats ...Statistic) ([][]float64, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b.replicates(sample, streamOne, stats), nil
}

// replicates draws indices into the sorted sample and counts them, so each
// resample comes out sorted in O(n) instead of being sorted in O(n log n):
// this is what makes hundreds of cells of hundreds of samples cheap.
func (b Bootstrap) replicates(sample []float64, stream uint64, stats []Statistic) [][]float64 {
	nb := b.resamples()
	out := make([][]float64, len(stats))
	for i := range out {
		out[i] = make([]float64, nb)
	}
	n := len(sample)
	if n == 0 {
		for i := range out {
			for r := range out[i] {
				out[i][r] = math.NaN()
			}
		}
		return out
	}
	sorted := slices.Clone(sample)
	slices.Sort(sorted)
	// The PCG is used directly, and an index drawn as the high word of
	// u·n (Lemire's method without its rejection step, a bias below n/2⁶⁴),
	// because drawing is half the work.
	rng := rand.NewPCG(b.Seed, stream)
	counts := make([]int32, n)
	// Two spare slots let the expansion below write every value twice
	// without a branch; later values overwrite the extra copies.
	buf := make([]float64, n+2)
	resample := buf[:n]
	for r := range nb {
		clear(counts)
		for range n {
			j, _ := bits.Mul64(rng.Uint64(), uint64(n))
			counts[j]++
		}
		k := 0
		for j, c := range counts {
			v := sorted[j]
			buf[k], buf[k+1] = v, v
			for i := int32(2); i < c; i++ {
				buf[k+int(i)] = v
			}
			k += int(c)
		}
		for i, stat := range stats {
			out[i][r] = stat(resample)
		}
	}
	return out
}

// Percentile returns the percentile interval of replicates at the level:
// their (1-level)/2 and (1+level)/2 quantiles (type 7). NaN replicates make
// the interval NaN. replicates is not modified.
func Percentile(replicates []float64, level float64) Interval {
	nan := Interval{math.NaN(), math.NaN()}
	if len(replicates) == 0 {
		return nan
	}
	s := slices.Clone(replicates)
	for _, v := range s {
		if math.IsNaN(v) {
			return nan
		}
	}
	slices.Sort(s)
	a := (1 - level) / 2
	return Interval{Lo: Quantile(s, a), Hi: Quantile(s, 1-a)}
}

// Interval returns the percentile interval of replicates at b's level.
func (b Bootstrap) Interval(replicates []float64) Interval {
	return Percentile(replicates, b.level())
}

// RatioInterval returns the percentile interval of num[r]/den[r]: with num
// and den replicates of two independently resampled samples, that is the
// bootstrap interval of the ratio of their statistics. A den replicate of 0
// makes the ratio undefined and the interval NaN. num and den must have
// the same length.
func (b Bootstrap) RatioInterval(num, den []float64) Interval {
	if len(num) != len(den) {
		return Interval{math.NaN(), math.NaN()}
	}
	q := make([]float64, len(num))
	for r := range num {
		if den[r] == 0 {
			return Interval{math.NaN(), math.NaN()}
		}
		q[r] = num[r] / den[r]
	}
	return b.Interval(q)
}

// CI returns the bootstrap confidence interval of each statistic of sample,
// e.g. b.CI(times, report.Median, report.IQRMean).
func (b Bootstrap) CI(sample []float64, stats ...Statistic) ([]Interval, error) {
	reps, err := b.Replicates(sample, stats...)
	if err != nil {
		return nil, err
	}
	out := make([]Interval, len(stats))
	for i := range stats {
		out[i] = b.Interval(reps[i])
	}
	return out, nil
}

// RatioCI returns the bootstrap confidence interval of stat(num)/stat(den)
// for each statistic, resampling num and den independently: e.g. a tool's
// IQR mean relative to direct's in the same cell.
func (b Bootstrap) RatioCI(num, den []float64, stats ...Statistic) ([]Interval, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	nr := b.replicates(num, streamOne, stats)
	dr := b.replicates(den, streamTwo, stats)
	out := make([]Interval, len(stats))
	for i := range stats {
		out[i] = b.RatioInterval(nr[i], dr[i])
	}
	return out, nil
}

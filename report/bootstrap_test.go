package report

import (
	"encoding/json"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"
)

func seq(from, to float64) []float64 {
	var v []float64
	for x := from; x <= to; x++ {
		v = append(v, x)
	}
	return v
}

func repeat(v float64, n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func TestBootstrapCI(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name   string
		b      Bootstrap
		sample []float64
		// want: exact intervals for median and IQR mean; NaN compares equal.
		want []Interval
		// or, when want is nil: each interval contains the point estimate,
		// and is symmetric around center within tol.
		center, tol float64
	}{
		{name: "constant sample gives a degenerate interval", sample: repeat(7.5, 400),
			want: []Interval{{7.5, 7.5}, {7.5, 7.5}}},
		{name: "one value", sample: []float64{3}, want: []Interval{{3, 3}, {3, 3}}},
		{name: "no values", sample: nil, want: []Interval{{nan, nan}, {nan, nan}}},
		{name: "symmetric 1..401", sample: seq(1, 401), center: 201, tol: 6},
		{name: "symmetric, unsorted input", sample: shuffled(seq(1, 401)), center: 201, tol: 6},
		{name: "symmetric, 200 resamples, 90%", b: Bootstrap{Resamples: 200, Level: 0.9, Seed: 7},
			sample: seq(-50, 50), center: 0, tol: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.b.CI(tt.sample, Median, IQRMean)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != nil {
				for i := range tt.want {
					if !sameInterval(got[i], tt.want[i]) {
						t.Errorf("interval %d = %v, want %v", i, got[i], tt.want[i])
					}
				}
				return
			}
			sorted := slices.Sorted(slices.Values(tt.sample))
			for i, est := range []float64{Median(sorted), IQRMean(sorted)} {
				iv := got[i]
				if !iv.Contains(est) || !(iv.Lo < iv.Hi) {
					t.Errorf("interval %d = %v does not contain estimate %v", i, iv, est)
				}
				if d := (tt.center - iv.Lo) - (iv.Hi - tt.center); math.Abs(d) > tt.tol {
					t.Errorf("interval %d = %v: asymmetric around %v by %v", i, iv, tt.center, d)
				}
			}
		})
	}
}

func shuffled(v []float64) []float64 {
	r := rand.New(rand.NewPCG(1, 2))
	v = slices.Clone(v)
	r.Shuffle(len(v), func(i, j int) { v[i], v[j] = v[j], v[i] })
	return v
}

func sameInterval(a, b Interval) bool {
	eq := func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }
	return eq(a.Lo, b.Lo) && eq(a.Hi, b.Hi)
}

func TestBootstrapRatioCI(t *testing.T) {
	lognormal := func(seed uint64, n int, mu float64) []float64 {
		r := rand.New(rand.NewPCG(seed, 0))
		v := make([]float64, n)
		for i := range v {
			v[i] = math.Exp(mu + 0.3*r.NormFloat64())
		}
		return v
	}
	nan := math.NaN()
	tests := []struct {
		name     string
		num, den []float64
		want     []Interval // exact, when set
		contains float64    // otherwise: both intervals contain this
	}{
		{name: "constants", num: repeat(2, 50), den: repeat(1, 80), want: []Interval{{2, 2}, {2, 2}}},
		{name: "zero denominator", num: repeat(2, 10), den: repeat(0, 10), want: []Interval{{nan, nan}, {nan, nan}}},
		{name: "empty numerator", num: nil, den: repeat(1, 10), want: []Interval{{nan, nan}, {nan, nan}}},
		{name: "same distribution", num: lognormal(1, 400, 2), den: lognormal(2, 400, 2), contains: 1},
		{name: "twice as slow", num: lognormal(3, 400, 2+math.Ln2), den: lognormal(4, 400, 2), contains: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Bootstrap{Seed: 42}.RatioCI(tt.num, tt.den, Median, IQRMean)
			if err != nil {
				t.Fatal(err)
			}
			for i, iv := range got {
				if tt.want != nil {
					if !sameInterval(iv, tt.want[i]) {
						t.Errorf("interval %d = %v, want %v", i, iv, tt.want[i])
					}
					continue
				}
				if !iv.Contains(tt.contains) || iv.Hi-iv.Lo > 0.2*tt.contains {
					t.Errorf("interval %d = %v: want a narrow interval containing %v", i, iv, tt.contains)
				}
			}
		})
	}
}

// TestBootstrapDeterminism: the same seed gives the same intervals, another
// seed other ones, and the counting resampler draws exactly the resamples
// a plain sort-every-resample implementation draws.
func TestBootstrapDeterminism(t *testing.T) {
	sample := shuffled(seq(1, 300))
	for i := range sample {
		sample[i] = sample[i] * sample[i] / 7 // skewed, with distinct values
	}
	b := Bootstrap{Seed: 99, Resamples: 500}
	a1, _ := b.CI(sample, Median, IQRMean)
	a2, _ := b.CI(sample, Median, IQRMean)
	if a1[0] != a2[0] || a1[1] != a2[1] {
		t.Fatalf("same seed, different intervals: %v, %v", a1, a2)
	}
	b3 := b
	b3.Seed = 100
	a3, _ := b3.CI(sample, Median, IQRMean)
	if a1[0] == a3[0] && a1[1] == a3[1] {
		t.Errorf("seeds 99 and 100 give the same intervals %v", a1)
	}

	// Reference: draw the same indices, sort each resample.
	sorted := slices.Sorted(slices.Values(sample))
	rng := rand.NewPCG(b.Seed, streamOne)
	var med, iqm []float64
	for range b.Resamples {
		rs := make([]float64, len(sorted))
		for k := range rs {
			j, _ := bits.Mul64(rng.Uint64(), uint64(len(sorted)))
			rs[k] = sorted[j]
		}
		slices.Sort(rs)
		med = append(med, Median(rs))
		iqm = append(iqm, IQRMean(rs))
	}
	if want := Percentile(med, 0.95); a1[0] != want {
		t.Errorf("median interval %v, reference %v", a1[0], want)
	}
	if want := Percentile(iqm, 0.95); a1[1] != want {
		t.Errorf("IQR mean interval %v, reference %v", a1[1], want)
	}
}

// TestBootstrapCoverage checks that the intervals mean what they say: about
// 95 % of the intervals of samples from a known distribution contain its
// median.
func TestBootstrapCoverage(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	const trials = 200
	hit := 0
	for i := range trials {
		v := make([]float64, 100)
		for j := range v {
			v[j] = r.ExpFloat64() // median ln 2
		}
		iv, err := Bootstrap{Resamples: 400, Seed: uint64(i)}.CI(v, Median)
		if err != nil {
			t.Fatal(err)
		}
		if iv[0].Contains(math.Ln2) {
			hit++
		}
	}
	if c := float64(hit) / trials; c < 0.88 || c > 0.995 {
		t.Errorf("coverage %.3f, want about 0.95", c)
	}
}

func TestBootstrapValidate(t *testing.T) {
	for _, b := range []Bootstrap{{Resamples: -1}, {Resamples: 2_000_000}, {Level: 1}, {Level: -0.1}, {Level: math.NaN()}} {
		if err := b.Validate(); err == nil {
			t.Errorf("%+v: no error", b)
		}
		if _, err := b.CI([]float64{1}, Median); err == nil {
			t.Errorf("%+v: CI: no error", b)
		}
	}
	if err := (Bootstrap{}).Validate(); err != nil {
		t.Errorf("zero value: %v", err)
	}
}

func TestIntervalJSON(t *testing.T) {
	for _, tt := range []struct {
		iv   Interval
		want string
	}{
		{Interval{1.5, 2}, `{"lo":1.5,"hi":2}`},
		{Interval{math.NaN(), math.NaN()}, `{"lo":null,"hi":null}`},
	} {
		b, err := json.Marshal(tt.iv)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tt.want {
			t.Errorf("marshal %v = %s, want %s", tt.iv, b, tt.want)
		}
		var back Interval
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !sameInterval(back, tt.iv) {
			t.Errorf("round trip %v → %v", tt.iv, back)
		}
	}
}

// BenchmarkBootstrapCell is one cell of a report: median and IQR mean
// intervals of 400 response times with 2000 resamples.
func BenchmarkBootstrapCell(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	v := make([]float64, 400)
	for i := range v {
		v[i] = math.Exp(3 + 0.5*r.NormFloat64())
	}
	for b.Loop() {
		if _, err := (Bootstrap{Seed: 1}).CI(v, Median, IQRMean); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBootstrapRatio is one tool cell's ratio to direct: both
// samples resampled, median and IQR mean.
func BenchmarkBootstrapRatio(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	num, den := make([]float64, 400), make([]float64, 400)
	for i := range num {
		num[i] = math.Exp(3.2 + 0.5*r.NormFloat64())
		den[i] = math.Exp(3 + 0.5*r.NormFloat64())
	}
	for b.Loop() {
		if _, err := (Bootstrap{Seed: 1}).RatioCI(num, den, Median, IQRMean); err != nil {
			b.Fatal(err)
		}
	}
}

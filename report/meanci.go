package report

import "math"

// MeanCI is the 95 % confidence interval of the mean of v by Student's t:
// mean ± t(0.975, n−1)·s/√n, NaN for fewer than two values. It is what a
// cell of a few repetitions gets (a bulk stream's Gbit/s, one value per
// repetition): a percentile bootstrap of five values would draw from only
// 126 distinct resamples and, lacking the t factor, cover the mean far less
// often than 95 %; t assumes the repetitions scatter about normally, which
// a handful of runs cannot check but is the usual assumption at this size.
func MeanCI(v []float64) Interval {
	n := len(v)
	if n < 2 {
		return Interval{math.NaN(), math.NaN()}
	}
	m := mean(v)
	half := t975(n-1) * math.Sqrt(variance(v)) / math.Sqrt(float64(n))
	return Interval{Lo: m - half, Hi: m + half}
}

// RatioCI is the 95 % confidence interval of mean(x)/mean(y), x and y
// measured independently (a tool's stream runs and direct's): Welch's t on
// the ratio's logarithm, whose standard error the delta method gives as
// √(s²x/(nx·x̄²) + s²y/(ny·ȳ²)), with Welch–Satterthwaite's degrees of
// freedom rounded down (a wider t). The interval is r·e^(±t·se): positive,
// and as wide either way on a log scale, as a ratio's should be. NaN below
// two values each or where a mean is not positive.
func RatioCI(x, y []float64) Interval {
	nx, ny := float64(len(x)), float64(len(y))
	mx, my := mean(x), mean(y)
	if nx < 2 || ny < 2 || mx <= 0 || my <= 0 {
		return Interval{math.NaN(), math.NaN()}
	}
	r := mx / my
	a, b := variance(x)/(nx*mx*mx), variance(y)/(ny*my*my)
	if a+b == 0 {
		return Interval{Lo: r, Hi: r}
	}
	df := (a + b) * (a + b) / (a*a/(nx-1) + b*b/(ny-1))
	half := t975(max(1, int(df))) * math.Sqrt(a+b)
	return Interval{Lo: r * math.Exp(-half), Hi: r * math.Exp(half)}
}

// variance is v's sample variance (n−1 in the denominator).
func variance(v []float64) float64 {
	m := mean(v)
	ss := 0.0
	for _, x := range v {
		ss += (x - m) * (x - m)
	}
	return ss / float64(len(v)-1)
}

// t975s are Student's t 0.975 quantiles for 1..30 degrees of freedom.
var t975s = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// t975 is Student's t 0.975 quantile for df degrees of freedom: the table,
// then the normal quantile's Cornish–Fisher expansion (within 1e-4 from 30).
func t975(df int) float64 {
	if df <= len(t975s) {
		return t975s[df-1]
	}
	const z = 1.959964
	d := float64(df)
	return z + (z*z*z+z)/(4*d) + (5*math.Pow(z, 5)+16*z*z*z+3*z)/(96*d*d)
}

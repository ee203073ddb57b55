package report

import (
	"math"
	"testing"
)

func TestMeanCI(t *testing.T) {
	for _, tc := range []struct {
		v      []float64
		lo, hi float64
	}{
		// mean 3, s = 1.5811, t(4) = 2.776: 3 ± 1.963.
		{[]float64{1, 2, 3, 4, 5}, 1.037, 4.963},
		// Two values: t(1) = 12.706, s/√2 = 1.
		{[]float64{8, 10}, -3.706, 21.706},
		// No scatter, no width.
		{[]float64{1.054, 1.054, 1.054}, 1.054, 1.054},
	} {
		iv := MeanCI(tc.v)
		if math.Abs(iv.Lo-tc.lo) > 1e-3 || math.Abs(iv.Hi-tc.hi) > 1e-3 {
			t.Errorf("MeanCI(%v) = %+v, want [%.3f, %.3f]", tc.v, iv, tc.lo, tc.hi)
		}
	}
	for _, v := range [][]float64{nil, {1.2}} {
		if iv := MeanCI(v); iv.Valid() {
			t.Errorf("MeanCI(%v) = %+v, want undefined", v, iv)
		}
	}
}

func TestT975(t *testing.T) {
	// Beyond the table, the expansion against published quantiles.
	for df, want := range map[int]float64{1: 12.706, 30: 2.042, 31: 2.0395, 40: 2.0211, 60: 2.0003, 100: 1.9840, 1000: 1.9623} {
		if got := t975(df); math.Abs(got-want) > 5e-4 {
			t.Errorf("t975(%d) = %.4f, want %.4f", df, got, want)
		}
	}
}

func TestRatioCI(t *testing.T) {
	for _, tc := range []struct {
		x, y   []float64
		lo, hi float64
	}{
		// r = 12; y has no scatter: se² = 4/(3·144), df 2, t(2) = 4.303.
		{[]float64{10, 12, 14}, []float64{1, 1, 1}, 7.932, 18.155},
		// r = 23/1.1; Welch's df 1.82 rounds down to 1: t(1) = 12.706.
		{[]float64{20, 22, 24, 26}, []float64{1.0, 1.2}, 5.380, 81.265},
		// No scatter, no width.
		{[]float64{2, 2}, []float64{4, 4}, 0.5, 0.5},
	} {
		iv := RatioCI(tc.x, tc.y)
		if math.Abs(iv.Lo-tc.lo) > 1e-3 || math.Abs(iv.Hi-tc.hi) > 1e-3 {
			t.Errorf("RatioCI(%v, %v) = %+v, want [%.3f, %.3f]", tc.x, tc.y, iv, tc.lo, tc.hi)
		}
	}
	for _, v := range [][2][]float64{{{1}, {1, 2}}, {{1, 2}, nil}, {{1, 2}, {-1, 1}}} {
		if iv := RatioCI(v[0], v[1]); iv.Valid() {
			t.Errorf("RatioCI(%v, %v) = %+v, want undefined", v[0], v[1], iv)
		}
	}
}

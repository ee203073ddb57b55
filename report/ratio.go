package report

import "strconv"

// Baseline is the tool every other tool is compared with.
const Baseline = "direct"

// RatioToDirect indexes rows by key and returns, for a row, its value
// relative to the Baseline tool's row with the same key. ok is false for
// the baseline itself and where the baseline was not measured or is 0.
// Every results table (response times, percentiles, throughput) has this
// shape; key must leave the tool out.
func RatioToDirect[R any, K comparable](rows []R, key func(R) K, tool func(R) string, value func(R) float64) func(R) (float64, bool) {
	base := map[K]float64{}
	for _, r := range rows {
		if tool(r) == Baseline {
			base[key(r)] = value(r)
		}
	}
	return func(r R) (float64, bool) {
		d, ok := base[key(r)]
		if !ok || d == 0 || tool(r) == Baseline {
			return 0, false
		}
		return value(r) / d, true
	}
}

// FormatRatio prints a ratio as "1.234×", or "-" without one.
func FormatRatio(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64) + "×"
}

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
	direct := DirectOf(rows, key, tool)
	return func(r R) (float64, bool) {
		d, ok := direct(r)
		if !ok || value(d) == 0 {
			return 0, false
		}
		return value(r) / value(d), true
	}
}

// DirectOf indexes rows by key and returns, for a row, the Baseline tool's
// row with the same key; ok is false for the baseline itself and where the
// baseline was not measured.
func DirectOf[R any, K comparable](rows []R, key func(R) K, tool func(R) string) func(R) (R, bool) {
	base := map[K]R{}
	for _, r := range rows {
		if tool(r) == Baseline {
			base[key(r)] = r
		}
	}
	return func(r R) (R, bool) {
		d, ok := base[key(r)]
		return d, ok && tool(r) != Baseline
	}
}

// FormatRatio prints a ratio as "1.234×", or "-" without one.
func FormatRatio(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 3, 64) + "×"
}

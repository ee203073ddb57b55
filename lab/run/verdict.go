package run

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/strait-net/strait/report"
)

// absoluteBelowMS is the direct response time under which a tool's cost is
// stated in milliseconds rather than as a ratio: on a link of a tenth of a
// millisecond, "2.8× direct" says less than "+0.25 ms per request".
const absoluteBelowMS = 2

// WriteVerdicts says in one line of plain words, for every cell of a tool
// other than direct, what the tool costs or gains there: a time difference
// on fast paths, a ratio with its 95 % interval elsewhere, "at par" when the
// interval holds 1. Throughput cells compare Gbit/s with direct's in the same
// scenario and stream count. Rate cells compare p99 with direct's, and say
// of any cell, direct's too, that it fell short of its rate: its latencies
// then measure a queue, and comparing them would mislead.
func WriteVerdicts(w io.Writer, cells []CellResult, rate []report.RateSummary, tput []report.ThroughputSummary) error {
	direct := map[Cell]CellResult{}
	for _, c := range cells {
		if c.Tool == report.Baseline {
			k := c.Cell
			k.Tool = ""
			direct[k] = c
		}
	}
	var lines []string
	for _, c := range cells {
		k := c.Cell
		k.Tool = ""
		d, ok := direct[k]
		if c.Tool == report.Baseline || !ok || c.RatioIQRMean == nil {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s %s %s: %s", c.Scenario, c.Workload, report.FormatSize(c.Payload), requestVerdict(c, d)))
	}
	bulk := map[report.ThroughputCell]report.ThroughputSummary{}
	for _, s := range tput {
		if s.Tool == report.Baseline && s.RR == 0 {
			k := s.ThroughputCell
			k.Tool = ""
			bulk[k] = s
		}
	}
	for _, s := range tput {
		k := s.ThroughputCell
		k.Tool = ""
		d, ok := bulk[k]
		if s.Tool == report.Baseline || s.RR != 0 || !ok || d.MeanGbps <= 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s bulk ×%d: %s", s.Scenario, s.Streams, throughputVerdict(s, d)))
	}
	if len(lines) > 0 {
		if _, err := fmt.Fprintln(w, "\nIn plain words (a request cell's IQR mean against direct's, with its 95 % bootstrap interval; a bulk cell's mean over its runs, with its ratio's 95 % interval from two runs on):"); err != nil {
			return err
		}
	}
	if rl := rateVerdicts(rate); len(rl) > 0 {
		if len(lines) == 0 {
			if _, err := fmt.Fprintln(w, "\nIn plain words:"); err != nil {
				return err
			}
		}
		lines = append(lines, rl...)
	}
	for _, l := range lines {
		if _, err := fmt.Fprintln(w, "  "+l); err != nil {
			return err
		}
	}
	return nil
}

// rateVerdicts are the plain-words lines of the open-loop cells: which
// fell short of their rate, and each other tool's p99 against direct's
// where both kept the rate.
func rateVerdicts(rate []report.RateSummary) []string {
	direct := map[report.RateCell]report.RateSummary{}
	for _, c := range rate {
		if c.Tool == report.Baseline {
			k := c.RateCell
			k.Tool = ""
			direct[k] = c
		}
	}
	var lines []string
	for _, c := range rate {
		head := fmt.Sprintf("%s %s %s, %v/s over %s connections", c.Scenario, c.Workload, report.FormatSize(c.Payload), c.Rate, report.ConnectionsText(c.Connections))
		if c.BelowRate {
			lowest := c.AnsweredRate
			for _, r := range c.Repetitions {
				lowest = min(lowest, r.AnsweredRate)
			}
			lines = append(lines, fmt.Sprintf("%s: %s did not reach the rate (%.0f/s answered, %.0f %%, in its slowest repetition): its latencies measure a saturated queue, not the path",
				head, c.Tool, lowest, 100*lowest/c.Rate))
			continue
		}
		k := c.RateCell
		k.Tool = ""
		d, ok := direct[k]
		if c.Tool == report.Baseline || !ok || d.BelowRate || c.Count == 0 || d.Count == 0 {
			continue
		}
		x, y := float64(c.Latency.P99)/1000, float64(d.Latency.P99)/1000
		verb, diff := "costs", x-y
		if diff < 0 {
			verb, diff = "saves", -diff
		}
		lines = append(lines, fmt.Sprintf("%s: %s %s %s ms at the p99 (%s ms against %s ms direct)", head, c.Tool, verb, ms(diff), ms(x), ms(y)))
	}
	return lines
}

func requestVerdict(c, d CellResult) string {
	x, y := c.IQRMeanMS, d.IQRMeanMS
	r := *c.RatioIQRMean
	iv := ""
	atPar := false
	if ci := c.RatioIQRMeanCI; ci != nil && ci.Valid() {
		iv = fmt.Sprintf(" [%.2f, %.2f]", ci.Lo, ci.Hi)
		atPar = ci.Lo <= 1 && ci.Hi >= 1
	}
	both := fmt.Sprintf("%s ms against %s ms direct", ms(x), ms(y))
	switch {
	case y < absoluteBelowMS && !atPar:
		verb := "costs"
		if x < y {
			verb = "saves"
		}
		return fmt.Sprintf("%s %s %s ms per request (%s)", c.Tool, verb, ms(math.Abs(x-y)), both)
	case atPar:
		return fmt.Sprintf("%s is at par with direct (%s; %.3f×%s)", c.Tool, both, r, iv)
	case r < 1:
		return fmt.Sprintf("%s is %.2f× faster than direct (%s; %.3f×%s)", c.Tool, 1/r, both, r, iv)
	default:
		return fmt.Sprintf("%s costs %.0f %% more than direct, +%s ms (%s; %.3f×%s)", c.Tool, (r-1)*100, ms(x-y), both, r, iv)
	}
}

// throughputVerdict compares a bulk cell with direct's. With two runs or
// more of each it says what the ratio's 95 % interval supports: "at
// least" its lower end, rounded down, where the interval lies above 1, "at
// most" its upper end where below, at par where it holds 1; so runs whose
// intervals overlap do not contradict each other.
func throughputVerdict(s, d report.ThroughputSummary) string {
	r := s.MeanGbps / d.MeanGbps
	both := fmt.Sprintf("%.3g Gbit/s against %.3g Gbit/s direct", s.MeanGbps, d.MeanGbps)
	if ci := report.RatioCI(s.Gbps, d.Gbps); ci.Valid() {
		both += fmt.Sprintf("; %.3g× [%.3g, %.3g], means of %d and %d runs", r, ci.Lo, ci.Hi, s.Reps(), d.Reps())
		switch {
		case ci.Lo > 1:
			return fmt.Sprintf("%s moves at least %s× as much as direct (%s)", s.Tool, roundDown(ci.Lo), both)
		case ci.Hi < 1:
			return fmt.Sprintf("%s moves at most %s× what direct moves (%s)", s.Tool, roundUp(ci.Hi), both)
		default:
			return fmt.Sprintf("%s moves as much as direct within the interval (%s)", s.Tool, both)
		}
	}
	switch {
	case r >= 1.05:
		return fmt.Sprintf("%s moves %.1f× as much as direct (%s)", s.Tool, r, both)
	case r <= 0.95:
		return fmt.Sprintf("%s moves %.2f× what direct moves (%s)", s.Tool, r, both)
	default:
		return fmt.Sprintf("%s moves as much as direct (%s)", s.Tool, both)
	}
}

// roundDown and roundUp print a ratio's bound to a whole number from 10
// up, to a tenth from 1 and to a hundredth below, rounded away from the
// interval's inside so the words claim no more than the interval, with
// more digits where that would give 1 (an upper end of 0.987 is "at most
// 0.99×", of 0.996 "at most 0.996×", not a "1.0×" that reads as par).
func roundDown(v float64) string { return roundTo(v, math.Floor) }
func roundUp(v float64) string   { return roundTo(v, math.Ceil) }

func roundTo(v float64, f func(float64) float64) string {
	if v >= 10 {
		return strconv.FormatFloat(f(v), 'f', 0, 64)
	}
	digits := 1
	if v < 1 {
		digits = 2
	}
	// A bound that rounds to 1 would read as par: add digits until it
	// does not (at most four).
	for ; ; digits++ {
		scale := math.Pow(10, float64(digits))
		r := f(v*scale) / scale
		if r != 1 || v == 1 || digits == 4 {
			return strconv.FormatFloat(r, 'f', digits, 64)
		}
	}
}

// ms formats milliseconds with three significant digits, at least to the
// microsecond below 1 ms.
func ms(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	case v < 100:
		return fmt.Sprintf("%.3g", v)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

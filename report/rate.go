package report

import (
	"fmt"
	"io"
	"strconv"

	"github.com/strait-net/strait/load"
)

// RateCell identifies one open-loop measurement: a workload and payload at
// a target request rate through a tool in a scenario.
type RateCell struct {
	Scenario string  `json:"scenario"`
	Tool     string  `json:"tool"`
	Workload string  `json:"workload"`
	Payload  int     `json:"payload_bytes"`
	Rate     float64 `json:"target_rate"`
}

// RateRepetition is one repetition's result, as `strait load rate` measured
// it (latency corrected for coordinated omission, µs).
type RateRepetition struct {
	Repetition   int              `json:"repetition"`
	AchievedRate float64          `json:"achieved_rate"`
	Count        int64            `json:"count"`
	Errors       int64            `json:"errors"`
	Latency      load.Percentiles `json:"latency"`
}

// RateSummary is a rate cell over its repetitions. Latency is the
// distribution of all repetitions' requests together (their histograms
// merged): tail percentiles of separate runs cannot be averaged.
type RateSummary struct {
	RateCell
	Repetitions  []RateRepetition `json:"repetitions"`
	Count        int64            `json:"count"`
	Errors       int64            `json:"errors"`
	AchievedRate float64          `json:"achieved_rate"` // mean over repetitions
	Latency      load.Percentiles `json:"latency"`
	// Usage is the tool's CPU time and peak memory over the repetitions.
	Usage *UsageSummary `json:"usage,omitempty"`
}

// SummarizeRate merges a cell's repetitions; reps[i] is repetition
// numbers[i]. Every repetition needs its number: the caller pairs them
// (lab/run reads repetition files by number), so a length mismatch is a
// bug there, and guessing which result is which would mislabel the table.
func SummarizeRate(cell RateCell, numbers []int, reps []*load.RateResult) (RateSummary, error) {
	s := RateSummary{RateCell: cell}
	if len(reps) == 0 {
		return s, fmt.Errorf("summarize rate %+v: no repetitions", cell)
	}
	if len(numbers) != len(reps) {
		return s, fmt.Errorf("summarize rate %+v: %d repetition numbers for %d results", cell, len(numbers), len(reps))
	}
	seen := make(map[int]bool, len(numbers))
	for i, r := range reps {
		if r == nil {
			return s, fmt.Errorf("summarize rate %+v: repetition %d: no result", cell, numbers[i])
		}
		if seen[numbers[i]] {
			return s, fmt.Errorf("summarize rate %+v: repetition %d given twice", cell, numbers[i])
		}
		seen[numbers[i]] = true
	}
	for i, r := range reps {
		s.Repetitions = append(s.Repetitions, RateRepetition{
			Repetition: numbers[i], AchievedRate: r.AchievedRate, Count: r.Count, Errors: r.Errors, Latency: r.Latency,
		})
		s.Count += r.Count
		s.Errors += r.Errors
		s.AchievedRate += r.AchievedRate / float64(len(reps))
	}
	s.AchievedRate = float64(int64(s.AchievedRate*100+0.5)) / 100
	if s.Count == 0 {
		return s, nil // no successful request: no distribution to merge
	}
	var err error
	if s.Latency, err = load.MergeLatency(reps...); err != nil {
		return s, fmt.Errorf("summarize rate %+v: %w", cell, err)
	}
	return s, nil
}

// RatePercentiles lists a summary's latency statistics in table order,
// in milliseconds: mean, then load.PercentileLabels.
func RatePercentiles(p load.Percentiles) []float64 {
	v := []float64{p.Mean / 1000}
	for _, x := range p.Values() {
		v = append(v, float64(x)/1000)
	}
	return v
}

// RatePercentileLabels names RatePercentiles' values.
var RatePercentileLabels = append([]string{"mean"}, load.PercentileLabels...)

// WriteRateTable prints one row per rate cell: achieved rate, errors, the
// merged latency percentiles in ms, and p50 and p99 relative to direct's
// at the same scenario, workload, payload and rate.
func WriteRateTable(w io.Writer, cells []RateSummary) error {
	if len(cells) == 0 {
		return nil
	}
	key := func(c RateSummary) RateCell { k := c.RateCell; k.Tool = ""; return k }
	tool := func(c RateSummary) string { return c.Tool }
	p50 := RatioToDirect(cells, key, tool, func(c RateSummary) float64 { return float64(c.Latency.P50) })
	p99 := RatioToDirect(cells, key, tool, func(c RateSummary) float64 { return float64(c.Latency.P99) })
	t := Table{Header: []string{"scenario", "workload", "payload", "rate/s", "tool", "reps", "achieved/s", "errors"}}
	for _, l := range RatePercentileLabels {
		t.Header = append(t.Header, l+" ms")
	}
	t.Header = append(t.Header, "p50 vs direct", "p99 vs direct", "tool CPU s", "CPU s/10k req", "peak RSS MB")
	for _, c := range cells {
		row := []string{c.Scenario, c.Workload, FormatSize(c.Payload), strconv.FormatFloat(c.Rate, 'f', -1, 64), c.Tool,
			strconv.Itoa(len(c.Repetitions)), strconv.FormatFloat(c.AchievedRate, 'f', 1, 64), strconv.FormatInt(c.Errors, 10)}
		if c.Count == 0 {
			// No successful request: no latency, and nothing to compare
			// (its zero percentiles would read as 0× direct's).
			for range len(RatePercentileLabels) + 2 {
				row = append(row, "-")
			}
			t.Add(append(row, c.Usage.CPUText(), c.Usage.Per10kText(), c.Usage.PeakRSSText())...)
			continue
		}
		for _, v := range RatePercentiles(c.Latency) {
			row = append(row, strconv.FormatFloat(v, 'f', 3, 64))
		}
		row = append(row, FormatRatio(p50(c)), FormatRatio(p99(c)), c.Usage.CPUText(), c.Usage.Per10kText(), c.Usage.PeakRSSText())
		t.Add(row...)
	}
	fmt.Fprintln(w, "\nopen-loop latency (corrected for coordinated omission), repetitions merged:")
	_, err := t.WriteTo(w)
	return err
}

// FormatSize renders a payload size the way the seeds label them: 60B,
// 1KB, 100KB, 1MB (decimal units).
func FormatSize(n int) string {
	switch {
	case n >= 1e6 && n%1e6 == 0:
		return strconv.Itoa(n/1e6) + "MB"
	case n >= 1e3 && n%1e3 == 0:
		return strconv.Itoa(n/1e3) + "KB"
	}
	return strconv.Itoa(n) + "B"
}

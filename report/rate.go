package report

import (
	"fmt"
	"io"
	"strconv"

	"github.com/strait-net/strait/load"
)

// RateCell identifies one open-loop measurement: a workload and payload at
// a target request rate over a number of connections through a tool in a
// scenario.
type RateCell struct {
	Scenario string  `json:"scenario"`
	Tool     string  `json:"tool"`
	Workload string  `json:"workload"`
	Payload  int     `json:"payload_bytes"`
	Rate     float64 `json:"target_rate"`
	// Connections is how many keep-alive connections carried the rate.
	// Each carries one request per round trip, so the lab raises the
	// experiment's count where the path's round trip would cap the rate
	// below the target (lab/run, README "Running the seeds'
	// experiments"); every tool of a scenario gets the same count. Zero
	// in results written before it was recorded.
	Connections int `json:"connections,omitempty"`
}

// RateShortfall is how far below its target rate a repetition may fall
// before its cell is flagged (RateSummary.BelowRate). The achieved rate
// counts until the last response, so a 10 s window loses about a percent
// to a WAN round trip and a retransmission at its end; a generator or
// path that cannot keep up falls short by far more, and its latencies
// then measure a growing queue, not the path.
const RateShortfall = 0.05

// BelowRate reports whether a repetition that achieved achieved requests/s
// fell short of its target by more than RateShortfall.
func BelowRate(achieved, target float64) bool { return achieved < (1-RateShortfall)*target }

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
	// BelowRate is set when a repetition achieved less than
	// (1 − RateShortfall) of the target rate: the cell measured a
	// saturated queue (too few connections for the path's round trip, or
	// a generator or tool that could not keep up), not the path.
	BelowRate bool             `json:"below_rate"`
	Latency   load.Percentiles `json:"latency"`
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
		if cell.Connections != 0 && r.Connections != cell.Connections {
			return s, fmt.Errorf("summarize rate %+v: repetition %d ran over %d connections, the cell over %d", cell, numbers[i], r.Connections, cell.Connections)
		}
		if BelowRate(r.AchievedRate, cell.Rate) {
			s.BelowRate = true
		}
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

// WriteRateTable prints one row per rate cell: the connections that
// carried it, achieved rate, errors, the merged latency percentiles in ms,
// and p50 and p99 relative to direct's at the same scenario, workload,
// payload and rate. An achieved rate below the target (BelowRate) is
// starred and explained under the table.
func WriteRateTable(w io.Writer, cells []RateSummary) error {
	if len(cells) == 0 {
		return nil
	}
	key := func(c RateSummary) RateCell { k := c.RateCell; k.Tool = ""; return k }
	tool := func(c RateSummary) string { return c.Tool }
	p50 := RatioToDirect(cells, key, tool, func(c RateSummary) float64 { return float64(c.Latency.P50) })
	p99 := RatioToDirect(cells, key, tool, func(c RateSummary) float64 { return float64(c.Latency.P99) })
	t := Table{Header: []string{"scenario", "workload", "payload", "rate/s", "conns", "tool", "reps", "achieved/s", "errors"}}
	for _, l := range RatePercentileLabels {
		t.Header = append(t.Header, l+" ms")
	}
	t.Header = append(t.Header, "p50 vs direct", "p99 vs direct", "tool CPU s", "CPU s/10k req", "peak RSS MB")
	below := 0
	for _, c := range cells {
		achieved := strconv.FormatFloat(c.AchievedRate, 'f', 1, 64)
		if c.BelowRate {
			achieved += "*"
			below++
		}
		row := []string{c.Scenario, c.Workload, FormatSize(c.Payload), strconv.FormatFloat(c.Rate, 'f', -1, 64), ConnectionsText(c.Connections), c.Tool,
			strconv.Itoa(len(c.Repetitions)), achieved, strconv.FormatInt(c.Errors, 10)}
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
	if _, err := t.WriteTo(w); err != nil {
		return err
	}
	if below > 0 {
		_, err := fmt.Fprintf(w, "* %d of %d cells fell short of their target rate by more than %.0f %% in a repetition: their latencies measure a saturated queue, not the path.\n",
			below, len(cells), 100*RateShortfall)
		return err
	}
	return nil
}

// ConnectionsText renders a rate cell's connection count; "-" for results
// written before it was recorded.
func ConnectionsText(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
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

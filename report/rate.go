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
// before its cell is flagged (RateSummary.BelowRate). The answered rate
// counts until the last response, so a 10 s window loses about a percent
// to a WAN round trip and a retransmission at its end; a generator or
// path that cannot keep up falls short by far more, and its latencies
// then measure a growing queue, not the path.
const RateShortfall = 0.05

// BelowRate reports whether a repetition that answered answered requests/s
// fell short of its target by more than RateShortfall. Failed requests do
// not count: a path that fails them on schedule does not carry the rate.
func BelowRate(answered, target float64) bool { return answered < (1-RateShortfall)*target }

// RateRepetition is one repetition's result, as `strait load rate` measured
// it (latency corrected for coordinated omission, µs).
// AnsweredRate and AchievedRate mean what load.RateResult's fields of
// those names mean: answered per second, and ended (answered or failed)
// per second.
type RateRepetition struct {
	Repetition   int              `json:"repetition"`
	AnsweredRate float64          `json:"answered_rate"`
	AchievedRate float64          `json:"achieved_rate"`
	Count        int64            `json:"count"`
	Errors       int64            `json:"errors"`
	Unsent       int64            `json:"unsent"`
	Latency      load.Percentiles `json:"latency"`
}

// RateSummary is a rate cell over its repetitions. Latency is the
// distribution of all repetitions' requests together (their histograms
// merged): tail percentiles of separate runs cannot be averaged.
type RateSummary struct {
	RateCell
	Repetitions []RateRepetition `json:"repetitions"`
	Count       int64            `json:"count"`
	// Errors counts the failed requests, Unsent those of them that never
	// left the generator (load.RateResult).
	Errors int64 `json:"errors"`
	Unsent int64 `json:"unsent"`
	// AnsweredRate and AchievedRate are the repetitions' means (see
	// RateRepetition); the table shows AnsweredRate.
	AnsweredRate float64 `json:"answered_rate"`
	AchievedRate float64 `json:"achieved_rate"`
	// BelowRate is set when a repetition answered less than
	// (1 − RateShortfall) of the target rate: the cell measured a
	// saturated queue (too few connections for the path's round trip, or
	// a generator or tool that could not keep up) or a failing path, not
	// the path's latency.
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
		answered := r.Answered()
		if BelowRate(answered, cell.Rate) {
			s.BelowRate = true
		}
		s.Repetitions = append(s.Repetitions, RateRepetition{
			Repetition: numbers[i], AnsweredRate: answered, AchievedRate: r.AchievedRate,
			Count: r.Count, Errors: r.Errors, Unsent: r.Unsent, Latency: r.Latency,
		})
		s.Count += r.Count
		s.Errors += r.Errors
		s.Unsent += r.Unsent
		s.AnsweredRate += answered / float64(len(reps))
		s.AchievedRate += r.AchievedRate / float64(len(reps))
	}
	s.AnsweredRate = float64(int64(s.AnsweredRate*100+0.5)) / 100
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
// carried it, the answered rate (requests answered per second: failed or
// unsent ones do not count), errors and how many of them were never sent,
// the merged latency percentiles in ms, and p50 and p99 relative to
// direct's at the same scenario, workload, payload and rate. An answered
// rate below the target (BelowRate) is starred and explained under the
// table.
func WriteRateTable(w io.Writer, cells []RateSummary) error {
	if len(cells) == 0 {
		return nil
	}
	key := func(c RateSummary) RateCell { k := c.RateCell; k.Tool = ""; return k }
	tool := func(c RateSummary) string { return c.Tool }
	p50 := RatioToDirect(cells, key, tool, func(c RateSummary) float64 { return float64(c.Latency.P50) })
	p99 := RatioToDirect(cells, key, tool, func(c RateSummary) float64 { return float64(c.Latency.P99) })
	t := Table{Header: []string{"scenario", "workload", "payload", "rate/s", "conns", "tool", "reps", "answered/s", "errors", "unsent"}}
	for _, l := range RatePercentileLabels {
		t.Header = append(t.Header, l+" ms")
	}
	t.Header = append(t.Header, "p50 vs direct", "p99 vs direct", "tool CPU s", "CPU s/10k req", "peak RSS MB")
	below := 0
	for _, c := range cells {
		answered := strconv.FormatFloat(c.AnsweredRate, 'f', 1, 64)
		if c.BelowRate {
			answered += "*"
			below++
		}
		row := []string{c.Scenario, c.Workload, FormatSize(c.Payload), strconv.FormatFloat(c.Rate, 'f', -1, 64), ConnectionsText(c.Connections), c.Tool,
			strconv.Itoa(len(c.Repetitions)), answered, strconv.FormatInt(c.Errors, 10), strconv.FormatInt(c.Unsent, 10)}
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
		_, err := fmt.Fprintf(w, "* %d of %d cells answered less than their target rate by more than %.0f %% in a repetition: their latencies measure a saturated queue or a failing path, not the path.\n",
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

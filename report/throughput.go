package report

import (
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/strait-net/strait/load"
)

// ThroughputCell identifies one `strait load stream` measurement: bulk TCP
// with Streams parallel streams, or, when RR is set, request/response
// with RR-byte messages on Streams connections.
type ThroughputCell struct {
	Scenario string `json:"scenario"`
	Tool     string `json:"tool"`
	Streams  int    `json:"streams"`
	RR       int    `json:"rr_bytes,omitempty"`
}

// ThroughputSummary is a cell over its repetitions. Bulk cells fill the
// Gbit/s fields, rr cells the transaction rates and round-trip times.
type ThroughputSummary struct {
	ThroughputCell
	Gbps     []float64 `json:"gbit_s"` // one per stream run: runs × repetitions
	MeanGbps float64   `json:"mean_gbit_s"`
	// MeanGbpsCI is the 95 % interval of MeanGbps over the runs (MeanCI);
	// absent below two runs and in older runs.
	MeanGbpsCI  *Interval `json:"mean_gbit_s_ci,omitempty"`
	Retransmits int64     `json:"retransmits"`
	CC          string    `json:"cc"`
	// TPS is transactions per second over all connections, one per
	// repetition; RTT each repetition's round-trip percentiles (µs).
	TPS       []float64          `json:"transactions_s,omitempty"`
	MeanTPS   float64            `json:"mean_transactions_s,omitempty"`
	MeanTPSCI *Interval          `json:"mean_transactions_s_ci,omitempty"`
	RTT       []load.Percentiles `json:"rtt,omitempty"`
	// Usage is the tool's CPU time and peak memory over the repetitions.
	Usage *UsageSummary `json:"usage,omitempty"`
}

// Add folds one run's result into s (a repetition's, or one of its
// throughput.runs).
func (s *ThroughputSummary) Add(r *load.StreamResult) {
	s.Gbps = append(s.Gbps, r.Gbps)
	s.Retransmits += max(r.Retransmits, 0)
	s.CC = r.CC
	s.MeanGbps = mean(s.Gbps)
	s.MeanGbpsCI = meanCI(s.Gbps)
	if s.RR > 0 {
		s.TPS = append(s.TPS, r.TPS)
		s.MeanTPS = mean(s.TPS)
		s.MeanTPSCI = meanCI(s.TPS)
		if r.Latency != nil {
			s.RTT = append(s.RTT, *r.Latency)
		}
	}
}

// Reps is the number of stream runs measured (throughput.runs in each
// repetition).
func (s ThroughputSummary) Reps() int { return len(s.Gbps) }

// samples are the runs' values that Value is the mean of.
func (s ThroughputSummary) samples() []float64 {
	if s.RR > 0 {
		return s.TPS
	}
	return s.Gbps
}

// Value is what the cell is compared by: Gbit/s for bulk, transactions/s
// for rr.
func (s ThroughputSummary) Value() float64 {
	if s.RR > 0 {
		return s.MeanTPS
	}
	return s.MeanGbps
}

// meanCI is MeanCI, nil where it is undefined.
func meanCI(v []float64) *Interval {
	iv := MeanCI(v)
	if !iv.Valid() {
		return nil
	}
	return &iv
}

// ValueCI is the 95 % interval of Value over the repetitions, nil below
// two.
func (s ThroughputSummary) ValueCI() *Interval {
	if s.RR > 0 {
		return s.MeanTPSCI
	}
	return s.MeanGbpsCI
}

// Range is the lowest and highest repetition's Value.
func (s ThroughputSummary) Range() (lo, hi float64) {
	v := s.samples()
	if len(v) == 0 {
		return 0, 0
	}
	lo, hi = v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// MedianRTT is the mean over repetitions of the rr round trip's median, in
// ms; 0 for bulk.
func (s ThroughputSummary) MedianRTT() float64 {
	var v []float64
	for _, p := range s.RTT {
		v = append(v, float64(p.P50)/1000)
	}
	return mean(v)
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// ThroughputRatio returns each cell's Value relative to direct's in the
// same scenario with the same streams and message size, and the ratio's
// 95 % interval over both cells' runs (RatioCI; not Valid below two runs).
func ThroughputRatio(cells []ThroughputSummary) func(ThroughputSummary) (float64, Interval, bool) {
	direct := DirectOf(cells,
		func(c ThroughputSummary) ThroughputCell { k := c.ThroughputCell; k.Tool = ""; return k },
		func(c ThroughputSummary) string { return c.Tool })
	return func(c ThroughputSummary) (float64, Interval, bool) {
		d, ok := direct(c)
		if !ok || d.Value() == 0 {
			return 0, Interval{math.NaN(), math.NaN()}, false
		}
		return c.Value() / d.Value(), RatioCI(c.samples(), d.samples()), true
	}
}

// WriteThroughputTable prints the bulk cells (Gbit/s) and then the rr
// cells (transactions/s), each with its ratio to direct.
func WriteThroughputTable(w io.Writer, cells []ThroughputSummary) error {
	ratio := ThroughputRatio(cells)
	bulk := Table{Header: []string{"scenario", "tool", "streams", "runs", "mean Gbit/s", "95% CI", "min", "max", "retransmits", "sender cc", "vs direct", "95% CI", "tool CPU s", "CPU s/GB", "peak RSS MB", "emulator CPU s"}}
	rr := Table{Header: []string{"scenario", "tool", "message", "connections", "runs", "mean trans/s", "95% CI", "min", "max", "median RTT ms", "vs direct", "95% CI", "tool CPU s", "CPU s/10k trans", "peak RSS MB"}}
	for _, c := range cells {
		lo, hi := c.Range()
		r, rci, ok := ratio(c)
		vs, vsCI := FormatRatio(r, ok), FormatCI(&rci, 3)
		if c.RR > 0 {
			rr.Add(c.Scenario, c.Tool, FormatSize(c.RR), strconv.Itoa(c.Streams), strconv.Itoa(c.Reps()),
				f1(c.MeanTPS), FormatCI(c.MeanTPSCI, 1), f1(lo), f1(hi), f3(c.MedianRTT()), vs, vsCI,
				c.Usage.CPUText(), c.Usage.Per10kText(), c.Usage.PeakRSSText())
			continue
		}
		bulk.Add(c.Scenario, c.Tool, strconv.Itoa(c.Streams), strconv.Itoa(c.Reps()), f3(c.MeanGbps), FormatCI(c.MeanGbpsCI, 3), f3(lo), f3(hi),
			strconv.FormatInt(c.Retransmits, 10), c.CC, vs, vsCI,
			c.Usage.CPUText(), c.Usage.PerGBText(), c.Usage.PeakRSSText(), c.Usage.EmulatorText())
	}
	for _, t := range []struct {
		title string
		t     Table
	}{{"bulk TCP throughput:", bulk}, {"TCP request/response rate:", rr}} {
		if len(t.t.Rows) == 0 {
			continue
		}
		fmt.Fprintln(w, "\n"+t.title)
		if _, err := t.t.WriteTo(w); err != nil {
			return err
		}
	}
	return nil
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
func f3(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// FormatCI is an interval as "[lo, hi]" with prec decimals, "-" where there
// is none (one repetition).
func FormatCI(iv *Interval, prec int) string {
	if iv == nil || !iv.Valid() {
		return "-"
	}
	return "[" + strconv.FormatFloat(iv.Lo, 'f', prec, 64) + ", " + strconv.FormatFloat(iv.Hi, 'f', prec, 64) + "]"
}

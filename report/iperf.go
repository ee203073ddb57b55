package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
)

// IperfCell identifies a seed 004 measurement: TCP or UDP throughput with
// iperf3, or ICMP round trips with ping, through a tool in a scenario.
type IperfCell struct {
	Scenario string `json:"scenario"`
	Tool     string `json:"tool"`
	Protocol string `json:"protocol"` // tcp, udp, icmp
}

// IperfSummary is a cell over its trials: Gbit/s for tcp and udp (one
// trial per iperf3 interval), ms per ping for icmp. A tool that does not
// carry the protocol has Carried false and no values: reports say "not
// carried", never 0.
type IperfSummary struct {
	IperfCell
	Carried     bool          `json:"carried"`
	Trials      []float64     `json:"trials,omitempty"`
	Mean        float64       `json:"mean,omitempty"`
	SD          float64       `json:"sd,omitempty"`
	Min         float64       `json:"min,omitempty"`
	Max         float64       `json:"max,omitempty"`
	LostPercent float64       `json:"lost_percent,omitempty"`
	Retransmits int64         `json:"retransmits,omitempty"`
	Usage       *UsageSummary `json:"usage,omitempty"`
}

// Unit is what the cell's values measure.
func (s IperfSummary) Unit() string {
	if s.Protocol == "icmp" {
		return "ms RTT"
	}
	return "Gbit/s"
}

// Finish computes the statistics of the trials.
func (s *IperfSummary) Finish() {
	if len(s.Trials) == 0 {
		return
	}
	s.Min, s.Max = math.Inf(1), math.Inf(-1)
	sum := 0.0
	for _, v := range s.Trials {
		sum += v
		s.Min, s.Max = min(s.Min, v), max(s.Max, v)
	}
	s.Mean = sum / float64(len(s.Trials))
	ss := 0.0
	for _, v := range s.Trials {
		ss += (v - s.Mean) * (v - s.Mean)
	}
	if len(s.Trials) > 1 {
		s.SD = math.Sqrt(ss / float64(len(s.Trials)-1))
	}
}

// IperfRatio is each cell's mean relative to direct's with the same
// scenario and protocol.
func IperfRatio(cells []IperfSummary) func(IperfSummary) (float64, bool) {
	return RatioToDirect(cells,
		func(c IperfSummary) IperfCell { k := c.IperfCell; k.Tool = ""; return k },
		func(c IperfSummary) string { return c.Tool },
		func(c IperfSummary) float64 {
			if !c.Carried || len(c.Trials) == 0 {
				return 0
			}
			return c.Mean
		})
}

// NotCarriedText is what a table shows for a protocol a tool does not
// carry.
const NotCarriedText = "not carried"

// WriteIperfTable prints one row per cell.
func WriteIperfTable(w io.Writer, cells []IperfSummary) error {
	if len(cells) == 0 {
		return nil
	}
	ratio := IperfRatio(cells)
	t := Table{Header: []string{"scenario", "tool", "protocol", "trials", "mean", "sd", "min", "max", "unit", "loss %", "retransmits", "vs direct", "tool CPU s", "CPU s/GB", "peak RSS MB", "emulator CPU s"}}
	for _, c := range cells {
		if !c.Carried {
			t.Add(c.Scenario, c.Tool, c.Protocol, "-", NotCarriedText, "-", "-", "-", c.Unit(), "-", "-", "-", "-", "-", "-", "-")
			continue
		}
		r, ok := ratio(c)
		vs := "-"
		if ok {
			vs = FormatRatio(r, true)
		}
		per := c.Usage.PerGBText()
		if c.Protocol == "icmp" {
			per = "-"
		}
		t.Add(c.Scenario, c.Tool, c.Protocol, strconv.Itoa(len(c.Trials)), f3(c.Mean), f3(c.SD), f3(c.Min), f3(c.Max), c.Unit(),
			strconv.FormatFloat(c.LostPercent, 'f', 2, 64), strconv.FormatInt(c.Retransmits, 10), vs,
			c.Usage.CPUText(), per, c.Usage.PeakRSSText(), c.Usage.EmulatorText())
	}
	fmt.Fprintln(w, "\niperf3 throughput (receiver, one trial per interval) and ping round trips:")
	_, err := t.WriteTo(w)
	return err
}

// Package emulation describes the impairment of one direction of an emulated
// link — delay, jitter, loss, rate, queue limit — with netem's meanings, so
// the kernel netem backend and strait's userspace emulator behave alike.
package emulation

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Distribution is the shape of the jitter added to Delay, as in netem.
type Distribution string

const (
	// Uniform draws the extra delay uniformly from [-Jitter, +Jitter]. It is
	// netem's behaviour when no distribution table is named.
	Uniform      Distribution = "uniform"
	Normal       Distribution = "normal"
	Pareto       Distribution = "pareto"
	ParetoNormal Distribution = "paretonormal"
)

// Distributions lists the accepted distribution names.
var Distributions = []Distribution{Uniform, Normal, Pareto, ParetoNormal}

// DefaultLimit is netem's default queue length in packets.
const DefaultLimit = 1000

// Params is the impairment of one direction of a link. The zero value is a
// perfect link.
type Params struct {
	Delay        time.Duration // constant one-way delay added to every packet
	Jitter       time.Duration // spread of the random delay around Delay
	Distribution Distribution  // shape of the jitter; empty means Uniform
	// Loss is the probability, in percent (0–100), that a packet is dropped.
	Loss float64
	// LossCorrelation, in percent, is how much each loss decision depends on
	// the previous one (netem's correlation for the random loss model).
	LossCorrelation float64
	Rate            uint64 // bits per second; 0 means unlimited
	// Limit is the queue length in packets: those waiting for the line on
	// a rated link, all held packets otherwise. 0 means QueueLimit's
	// default.
	Limit int
	// Reorder lets jitter reorder packets, as plain netem does. By default
	// packets leave in arrival order (a later packet never overtakes).
	Reorder bool
}

// IsZero reports whether p changes nothing about the traffic.
func (p Params) IsZero() bool {
	return p.Delay == 0 && p.Jitter == 0 && p.Loss == 0 && p.Rate == 0
}

// Dist returns the effective jitter distribution.
func (p Params) Dist() Distribution {
	if p.Distribution == "" {
		return Uniform
	}
	return p.Distribution
}

// DefaultBuffer is the line time a rated link's queue holds by default,
// when that is more than DefaultLimit packets.
const DefaultBuffer = 50 * time.Millisecond

// QueueLimit returns the effective queue length in packets: Limit if set;
// otherwise netem's 1000 packets, or DefaultBuffer of line time in
// 1500-byte packets on a rated link if that is more. A fixed 1000 packets
// is 12 ms at 1 Gbit/s; BBR keeps about one bandwidth-delay product queued
// whenever it overestimates the rate slightly, so on a 10 ms path such a
// buffer overflowed and cost a quarter of the throughput (measured: 0.75
// Gbit/s with 1000 packets, 0.93 with 4000).
func (p Params) QueueLimit() int {
	switch {
	case p.Limit != 0:
		return p.Limit
	case p.Rate == 0:
		return DefaultLimit
	}
	return max(DefaultLimit, int(float64(p.Rate)*DefaultBuffer.Seconds()/(8*1500)))
}

// Validate reports the first field that is out of range.
func (p Params) Validate() error {
	switch {
	case p.Delay < 0:
		return fmt.Errorf("delay %v: must not be negative", p.Delay)
	case p.Jitter < 0:
		return fmt.Errorf("jitter %v: must not be negative", p.Jitter)
	case p.Delay > time.Minute:
		return fmt.Errorf("delay %v: must be at most 1m", p.Delay)
	case p.Jitter > time.Minute:
		return fmt.Errorf("jitter %v: must be at most 1m", p.Jitter)
	case !(p.Loss >= 0 && p.Loss <= 100):
		return fmt.Errorf("loss %v%%: must be between 0%% and 100%%", p.Loss)
	case !(p.LossCorrelation >= 0 && p.LossCorrelation <= 100):
		return fmt.Errorf("loss-correlation %v%%: must be between 0%% and 100%%", p.LossCorrelation)
	case p.Limit < 0:
		return fmt.Errorf("limit %d: must not be negative", p.Limit)
	}
	if p.Distribution != "" && !validDistribution(p.Distribution) {
		return fmt.Errorf("distribution %q: must be one of %s", p.Distribution, distributionNames())
	}
	if p.Distribution != "" && p.Distribution != Uniform && p.Jitter == 0 {
		return fmt.Errorf("distribution %q: needs a jitter", p.Distribution)
	}
	return nil
}

func validDistribution(d Distribution) bool {
	for _, v := range Distributions {
		if d == v {
			return true
		}
	}
	return false
}

func distributionNames() string {
	names := make([]string, len(Distributions))
	for i, d := range Distributions {
		names[i] = string(d)
	}
	return strings.Join(names, ", ")
}

// String renders p in the same words the YAML and CLI accept.
func (p Params) String() string {
	if p.IsZero() {
		return "none"
	}
	var parts []string
	if p.Delay != 0 || p.Jitter != 0 {
		parts = append(parts, "delay "+FormatDuration(p.Delay))
	}
	if p.Jitter != 0 {
		parts = append(parts, "jitter "+FormatDuration(p.Jitter), "distribution "+string(p.Dist()))
	}
	if p.Loss != 0 {
		parts = append(parts, "loss "+roundPercent(p.Loss))
		if p.LossCorrelation != 0 {
			parts = append(parts, "loss-correlation "+roundPercent(p.LossCorrelation))
		}
	}
	if p.Rate != 0 {
		parts = append(parts, "rate "+FormatRate(p.Rate))
	}
	if p.Limit != 0 {
		parts = append(parts, "limit "+strconv.Itoa(p.Limit))
	}
	if p.Reorder {
		parts = append(parts, "reorder")
	}
	return strings.Join(parts, " ")
}

// ParseDuration accepts Go durations ("5ms", "1.25ms", "250us") and a bare
// "0".
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (use e.g. 5ms, 1.25ms, 250us)", s)
	}
	return d, nil
}

// FormatDuration renders d compactly, in milliseconds when it is at least 1ms.
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0ms"
	}
	if d%time.Microsecond == 0 && d >= time.Millisecond {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + "ms"
	}
	return d.String()
}

// ParsePercent accepts "0.08%" or a bare number meaning percent.
func ParsePercent(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a percentage (use e.g. 0.08%%)", s)
	}
	return v, nil
}

// FormatPercent renders v as a percentage.
func FormatPercent(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64) + "%"
}

// roundPercent renders v to four significant digits, for people: a loss
// composed from several links (Compose) is 0.2399 %, not 0.23990401 %.
func roundPercent(v float64) string {
	return strconv.FormatFloat(v, 'g', 4, 64) + "%"
}

// rateUnits follows tc(8): bit-based units and byte-based "bps" units.
var rateUnits = []struct {
	suffix string
	bits   float64
}{
	{"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
	{"tbps", 8e12}, {"gbps", 8e9}, {"mbps", 8e6}, {"kbps", 8e3}, {"bps", 8},
}

// ErrNoUnit is returned by ParseRate for a number without a unit, which tc
// would read as bytes per second and people usually mean as bits.
var ErrNoUnit = errors.New("rate needs a unit")

// ParseRate parses a tc-style rate ("1gbit", "300mbit", "12.5mbps") into
// bits per second.
func ParseRate(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "0" {
		return 0, nil
	}
	for _, u := range rateUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v*u.bits > 1e15 {
				break
			}
			return uint64(math.Round(v * u.bits)), nil
		}
	}
	return 0, fmt.Errorf("%q is not a rate (use e.g. 1gbit, 300mbit, 500kbit): %w", s, ErrNoUnit)
}

// FormatRate renders bits per second with the largest exact tc unit.
func FormatRate(bps uint64) string {
	for _, u := range rateUnits[:5] {
		if float64(bps) >= u.bits {
			return strconv.FormatFloat(float64(bps)/u.bits, 'f', -1, 64) + u.suffix
		}
	}
	return "0bit"
}

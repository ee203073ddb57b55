package kube

import (
	"math"
	"time"

	"github.com/strait-net/strait/lab/emulation"
	"github.com/strait-net/strait/lab/scenario"
)

// PathParams is one direction of a scenario's client–server path as one
// impairment: the namespace lab impairs the client's LAN link, the WAN link
// and the server's LAN link (scenario.Apply), while on clusters only the
// egress toward the other cluster is impaired, once per direction
// (docs/lab-clusters.md, "Link emulation"). So the three are composed:
// delays add; the jitter has the standard deviation of the sum of
// independent jitters (the square root of the sum of their variances) in
// the distribution of the largest; loss is 1−Π(1−lᵢ); the rate is the
// smallest. Loss correlation, queue limit and reordering are the WAN's
// where it impairs anything, else the LAN's.
func PathParams(sc scenario.Scenario) emulation.Params {
	out := Compose(sc.LAN, sc.WAN, sc.LAN)
	if out.IsZero() {
		return emulation.Params{}
	}
	from := sc.WAN
	if from.IsZero() {
		from = sc.LAN
	}
	out.LossCorrelation, out.Limit, out.Reorder = from.LossCorrelation, from.Limit, from.Reorder
	return out
}

// Compose is the impairment of the links ps crossed in a row (see
// PathParams); loss correlation, queue limit and reordering are left zero.
func Compose(ps ...emulation.Params) emulation.Params {
	var nonzero []emulation.Params
	for _, p := range ps {
		if !p.IsZero() {
			nonzero = append(nonzero, p)
		}
	}
	if len(nonzero) == 1 {
		// Exactly as given: no rounding.
		p := nonzero[0]
		p.LossCorrelation, p.Limit, p.Reorder = 0, 0, false
		return p
	}
	var out emulation.Params
	var variance, largest float64
	keep := 1.0
	for _, p := range nonzero {
		out.Delay += p.Delay
		if p.Jitter > 0 {
			sd := stddev(p)
			variance += sd * sd
			if sd > largest {
				largest, out.Distribution = sd, p.Dist()
			}
		}
		keep *= 1 - p.Loss/100
		if p.Rate != 0 && (out.Rate == 0 || p.Rate < out.Rate) {
			out.Rate = p.Rate
		}
	}
	if variance > 0 {
		out.Jitter = time.Duration(math.Round(math.Sqrt(variance) / sdPerJitter(out.Distribution)))
	}
	out.Loss = 100 * (1 - keep)
	if out.Loss < 1e-12 {
		out.Loss = 0
	}
	return out
}

// stddev is the standard deviation, in nanoseconds, of p's jitter.
func stddev(p emulation.Params) float64 {
	return float64(p.Jitter) * sdPerJitter(p.Dist())
}

// sdPerJitter is the standard deviation of a jitter of 1 in distribution
// d: netem draws uniform jitter from [−J, +J] (σ = J/√3) and scales its
// distribution tables so that σ = J.
func sdPerJitter(d emulation.Distribution) float64 {
	if d == emulation.Uniform || d == "" {
		return 1 / math.Sqrt(3)
	}
	return 1
}

package scenario

import (
	"fmt"
	"math"
	"time"

	"github.com/strait-net/strait/lab/emulation"
)

// Path is one direction of the scenario's client–server path as one
// impairment. The namespace lab impairs the client's LAN link, the WAN link
// and the server's LAN link (Apply); runs on clusters can impair only each
// cluster's egress toward the other, once per direction, so they apply
// Path there (docs/lab-clusters.md, "Link emulation"), and ComposePath
// gives the namespace lab the same path. Delays add; the jitter has the
// standard deviation of the sum of independent jitters (the square root of
// the sum of their variances) in the distribution of the largest; loss is
// 1−Π(1−lᵢ); the rate is the smallest. Loss correlation, queue limit and
// reordering are the WAN's where it impairs anything, else the LAN's.
func (s Scenario) Path() emulation.Params {
	out := Compose(s.LAN, s.WAN, s.LAN)
	if out.IsZero() {
		return emulation.Params{}
	}
	from := s.WAN
	if from.IsZero() {
		from = s.LAN
	}
	out.LossCorrelation, out.Limit, out.Reorder = from.LossCorrelation, from.Limit, from.Reorder
	return out
}

// ComposePath returns the scenario with its path composed onto the WAN
// link (Path, each direction) and clean LAN links: in the namespace lab it
// impairs the path exactly as a run on clusters does, so the two labs'
// cells can be compared, and against the scenario as defined it shows what
// splitting the impairment over three links changes. It assumes the path
// the built-in two-cluster topologies give, LAN, WAN, LAN (the runner
// checks the experiment's client and server). The result keeps the name
// (a cell "edg10" stays comparable with a run on clusters, which composes
// edg10 too) and records the original links in ComposedFrom.
func (s Scenario) ComposePath() (Scenario, error) {
	if s.AsDeclared {
		return Scenario{}, fmt.Errorf("scenario %s: nothing to compose: its links are the topology file's", s.Name)
	}
	if s.ComposedFrom != "" {
		return s, nil
	}
	out := s
	out.ComposedFrom = fmt.Sprintf("lan %v; wan %v", s.LAN, s.WAN)
	out.LAN, out.WAN = emulation.Params{}, s.Path()
	out.Description = fmt.Sprintf("%s; composed: wan %v each direction, lan none (lab/scenario Path)", s.Description, out.WAN)
	return out, nil
}

// Compose is the impairment of the links ps crossed in a row (see Path);
// loss correlation, queue limit and reordering are left zero.
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

package emulation

import (
	"math"
	"sync"
	"time"
)

// DistScale is netem's NETEM_DIST_SCALE: table entries are standardized
// values multiplied by it, so 8192 stands for one Jitter.
const DistScale = 8192

// DistTableSize is the number of entries iproute2 ships in each .dist file.
const DistTableSize = 4096

var (
	tablesOnce sync.Once
	tables     map[Distribution][]int16
)

// Table returns the inverse-CDF table iproute2 generates for d (normal.c,
// pareto.c, paretonormal.c in iproute2's netem directory), entry k being the
// standardized value at quantile k/4096 times DistScale. netem delays a
// packet by Delay + Jitter*table[rnd%4096]/DistScale. Uniform has no table
// (nil): netem draws it directly. Sharing the tables, rather than sampling
// the textbook distributions, keeps the userspace emulator's shape — the
// pareto tail clipped at 4 jitters, the comonotone paretonormal mix — the
// same as the kernel's.
func (d Distribution) Table() []int16 {
	tablesOnce.Do(buildTables)
	return tables[d]
}

func buildTables() {
	const genSize = 16384 // TABLESIZE in the generators; every 4th entry is kept
	normal := make([]int16, DistTableSize)
	pareto := make([]int16, DistTableSize)
	paretoNormal := make([]int16, DistTableSize)
	for k := range DistTableSize {
		i := 4 * k
		// normal.c sweeps x and keeps the last x with
		// rint(16384*Phi(x)) == i, that is Phi^-1((i+0.5)/16384).
		x := math.Sqrt2 * math.Erfinv(2*(float64(i)+0.5)/genSize-1)
		nv := int(math.RoundToEven(x * DistScale))
		normal[k] = clamp16(nv)

		// pareto.c walks u from 1 down in steps of 16/65536.
		pareto[k] = int16(paretoValue(65536 - 16*k))

		// paretonormal.c mixes normal and pareto at the same quantile,
		// (normal + 3*pareto)/4 with C's truncating division.
		paretoNormal[k] = clamp16((nv + 3*paretoValue(65536-4*i)) / 4)
	}
	tables = map[Distribution][]int16{Normal: normal, Pareto: pareto, ParetoNormal: paretoNormal}
}

// paretoValue is iproute2's pareto table entry for u = i/65536 (shape 3,
// shifted to mean 0, clipped at 32767).
func paretoValue(i int) int {
	v := 1 / math.Pow(float64(i)/65536, 1.0/3)
	v = (v - 1.5) * (4.0 / 3.0) * DistScale
	if v > 32767 {
		v = 32767
	}
	return int(math.RoundToEven(v))
}

func clamp16(v int) int16 {
	return int16(max(math.MinInt16, min(math.MaxInt16, v)))
}

// DelayStats returns the mean and standard deviation of the one-way delay
// netem adds with p's delay, jitter and distribution (before rate and
// queueing), including netem's clipping of negative delays to zero. These
// are the theoretical figures measurements are judged against.
func (p Params) DelayStats() (mean, sd time.Duration) {
	if p.Jitter == 0 {
		return p.Delay, 0
	}
	mu, sigma := float64(p.Delay), float64(p.Jitter)
	var s, s2 float64
	var n int
	add := func(v float64) {
		v = max(v, 0)
		s += v
		s2 += v * v
		n++
	}
	if t := p.Dist().Table(); t != nil {
		for _, e := range t {
			add(mu + sigma*float64(e)/DistScale)
		}
	} else {
		// Uniform on [mu-sigma, mu+sigma): a fine midpoint grid is exact
		// enough and handles the clipping at zero like the tables.
		const steps = 1 << 16
		for i := range steps {
			add(mu - sigma + 2*sigma*(float64(i)+0.5)/steps)
		}
	}
	m := s / float64(n)
	v := max(s2/float64(n)-m*m, 0)
	return time.Duration(math.Round(m)), time.Duration(math.Round(math.Sqrt(v)))
}

package emulator

import (
	"math"
	"math/rand/v2"

	"github.com/strait-net/strait/lab/emulation"
)

// verdict is what the shaper decides for one packet.
type verdict uint8

const (
	pass      verdict = iota
	dropLoss          // random loss
	dropLimit         // queue full: tail drop
)

// shaper decides, for one direction, whether a packet is dropped and when it
// leaves, with netem's arithmetic. It is pure bookkeeping on virtual time
// (nanoseconds on the engine's clock), so tests can replay millions of
// packets without waiting. Not safe for concurrent use.
type shaper struct {
	rng *rand.Rand

	delay, jitter int64
	table         []int16 // nil: uniform jitter
	loss          uint32  // netem's scaled probability; 0 never drops
	lossRho       uint32
	lossLast      uint32
	rate          uint64 // bits per second; 0 unlimited
	limit         int
	reorder       bool

	serFree     int64  // when the serializer finishes the last packet
	serRem      uint64 // remainder of the last serialization time, in ns*bps
	lastRelease int64
	backlog     fifo64 // serialization end times of the packets not yet on the wire
}

// fifo64 is a ring of int64.
type fifo64 struct {
	v          []int64
	head, size int
}

func (f *fifo64) push(x int64) {
	if f.size == len(f.v) {
		grown := make([]int64, max(16, 2*len(f.v)))
		for i := range f.size {
			grown[i] = f.v[(f.head+i)%len(f.v)]
		}
		f.v, f.head = grown, 0
	}
	f.v[(f.head+f.size)%len(f.v)] = x
	f.size++
}

// dropUpTo forgets the values at the front that are at most x.
func (f *fifo64) dropUpTo(x int64) {
	for f.size > 0 && f.v[f.head] <= x {
		f.head = (f.head + 1) % len(f.v)
		f.size--
	}
}

func newShaper(p emulation.Params, seed1, seed2 uint64) *shaper {
	s := &shaper{
		rng:     rand.New(rand.NewPCG(seed1, seed2)),
		delay:   int64(p.Delay),
		jitter:  int64(p.Jitter),
		loss:    percentU32(p.Loss),
		lossRho: percentU32(p.LossCorrelation),
		rate:    p.Rate,
		limit:   p.QueueLimit(),
		reorder: p.Reorder,
	}
	if s.jitter != 0 {
		s.table = p.Dist().Table()
	}
	// netem seeds the correlation state with a random value.
	s.lossLast = s.rng.Uint32()
	return s
}

// percentU32 scales a percentage the way tc does before handing it to the
// kernel: the fraction times UINT32_MAX, rounded.
func percentU32(pct float64) uint32 {
	return uint32(math.Round(pct / 100 * math.MaxUint32))
}

// crandom is netem's get_crandom: with correlation rho, each value is a
// weighted mean of a fresh random value and the previous result. (This keeps
// the mean but narrows the spread, so a correlated loss of p% drops fewer
// than p% of packets — netem's known behaviour, kept so both backends
// agree.)
func (s *shaper) crandom(rho uint32, last *uint32) uint32 {
	return correlate(s.rng.Uint32(), rho, last)
}

// correlate is crandom's arithmetic on the fresh random value v; the
// kernel backend's loss program (lossProgram) does the same.
func correlate(v, rho uint32, last *uint32) uint32 {
	if rho == 0 {
		return v
	}
	r := uint64(rho) + 1
	a := uint32((uint64(v)*((1<<32)-r) + uint64(*last)*r) >> 32)
	*last = a
	return a
}

// admit decides the fate of a packet of size bytes that arrived at now,
// while queued packets are held. The release time is only meaningful for
// pass, and so is held: the part of the release the packet's own transit
// (its serialization and its delay) does not account for, the time it
// waits behind the serializer and behind a packet the FIFO clamp keeps it
// after. Leaving up to held early still leaves no sooner than its own
// transit allows (see releaseAhead). The order of the checks is netem's:
// loss, then the queue limit, then the delay.
//
// What the limit bounds depends on the rate. With a rate, it is the buffer
// in front of the line: packets waiting for (or in) serialization; packets
// already serialized are on the wire for their delay and take no buffer, as
// on a real path. (netem counts those too, so at 1 Gbit/s and 10 ms of delay
// its default limit of 1000 already caps a single flow below the rate.)
// Without a rate there is no line to queue for, and the limit bounds every
// packet held, as in netem.
func (s *shaper) admit(now int64, size, queued int) (release, held int64, v verdict) {
	if s.loss != 0 && s.loss >= s.crandom(s.lossRho, &s.lossLast) {
		return 0, 0, dropLoss
	}
	if s.rate != 0 {
		s.backlog.dropUpTo(now)
		queued = s.backlog.size
	}
	if queued >= s.limit {
		return 0, 0, dropLimit
	}
	delay := s.sampleDelay()
	t := now
	var wait int64 // behind the serializer
	if s.rate != 0 {
		// A packet waits for the serializer, takes len*8/rate on the wire,
		// and then travels for its delay — unlike netem, which folds the
		// delay of the queue head into the rate computation. The remainder
		// is carried so long runs keep the exact rate.
		if s.serFree > t {
			wait = s.serFree - t
			t = s.serFree
		} else {
			s.serRem = 0
		}
		bits := uint64(size)*8*1e9 + s.serRem
		t += int64(bits / s.rate)
		s.serRem = bits % s.rate
		s.serFree = t
		s.backlog.push(t)
	}
	release = t + delay
	if !s.reorder && release < s.lastRelease {
		// The FIFO clamp: jitter never lets a packet overtake the one before.
		release = s.lastRelease
	}
	s.lastRelease = max(s.lastRelease, release)
	return release, wait + release - (t + delay), pass
}

// sampleDelay is netem's tabledist (without delay correlation, which Params
// does not offer), with negative results clipped to zero.
func (s *shaper) sampleDelay() int64 {
	if s.jitter == 0 {
		return s.delay
	}
	var d int64
	if s.table == nil {
		// Uniform on [delay-jitter, delay+jitter), in 64 bits so jitters
		// above netem's 2^31 ns cap still work.
		d = s.delay - s.jitter + int64(s.rng.Uint64N(uint64(2*s.jitter)))
	} else {
		t := int64(s.table[s.rng.Uint32()%uint32(len(s.table))])
		x := s.jitter * t
		if x >= 0 {
			x += emulation.DistScale / 2
		} else {
			x -= emulation.DistScale / 2
		}
		d = s.delay + x/emulation.DistScale
	}
	return max(d, 0)
}

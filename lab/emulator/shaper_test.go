package emulator

import (
	"math"
	"testing"
	"time"

	"github.com/strait-net/strait/lab/emulation"
)

// The shaper works on virtual time, so these tests replay large samples
// exactly and judge them only statistically.

func meanSD(xs []float64) (float64, float64) {
	var s float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)-1))
}

func TestDelayDistributions(t *testing.T) {
	const n = 400_000
	for _, tc := range []struct {
		dist emulation.Distribution
		// textbook sd in jitters, where the netem table matches it closely
		sdJitters float64
	}{
		{emulation.Uniform, 1 / math.Sqrt(3)},
		{emulation.Normal, 1},
		{emulation.Pareto, 0}, // clipped pareto: judged against the table only
		{emulation.ParetoNormal, 0},
	} {
		t.Run(string(tc.dist), func(t *testing.T) {
			p := emulation.Params{Delay: 20 * time.Millisecond, Jitter: 2 * time.Millisecond, Distribution: tc.dist}
			s := newShaper(p, 1, 2)
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = float64(s.sampleDelay())
			}
			m, sd := meanSD(xs)
			wantM, wantSD := p.DelayStats()
			// The mean of n samples has a standard error of sd/sqrt(n);
			// allow 5 of them. The sample sd's relative error is about
			// sqrt((kurtosis-1)/4n), under 0.5 % here; allow 2 %.
			if se := float64(wantSD) / math.Sqrt(n); math.Abs(m-float64(wantM)) > 5*se {
				t.Errorf("mean %v, want %v ± %v", time.Duration(m), wantM, time.Duration(5*se))
			}
			if math.Abs(sd/float64(wantSD)-1) > 0.02 {
				t.Errorf("sd %v, want %v ± 2%%", time.Duration(sd), wantSD)
			}
			if tc.sdJitters != 0 {
				if want := tc.sdJitters * float64(p.Jitter); math.Abs(sd/want-1) > 0.02 {
					t.Errorf("sd %v, textbook %v", time.Duration(sd), time.Duration(want))
				}
			}
			t.Logf("%s: mean %v (theory %v), sd %v (theory %v)", tc.dist, time.Duration(m), wantM, time.Duration(sd), wantSD)
		})
	}
}

func TestDelayClippedAtZero(t *testing.T) {
	s := newShaper(emulation.Params{Delay: time.Millisecond, Jitter: 5 * time.Millisecond, Distribution: emulation.Normal}, 3, 4)
	for range 100_000 {
		if d := s.sampleDelay(); d < 0 {
			t.Fatalf("negative delay %v", d)
		}
	}
}

// wilson99 is the 99.9 % Wilson score interval of k successes in n.
func wilson99(k, n int) (lo, hi float64) {
	const z = 3.2905
	p, nf := float64(k)/float64(n), float64(n)
	den := 1 + z*z/nf
	c := (p + z*z/(2*nf)) / den
	h := z / den * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf))
	return c - h, c + h
}

func TestLossRate(t *testing.T) {
	for _, loss := range []float64{0.08, 1, 10, 50} {
		s := newShaper(emulation.Params{Loss: loss}, 5, 6)
		const n = 1_000_000
		lost := 0
		for i := range n {
			if _, _, v := s.admit(int64(i)*1000, 100, 0); v == dropLoss {
				lost++
			}
		}
		lo, hi := wilson99(lost, n)
		if p := loss / 100; p < lo || p > hi {
			t.Errorf("loss %v%%: lost %d of %d, 99.9%% interval %.4f–%.4f%%", loss, lost, n, 100*lo, 100*hi)
		}
	}
	s := newShaper(emulation.Params{Loss: 100}, 5, 6)
	for range 10_000 {
		if _, _, v := s.admit(0, 100, 0); v != dropLoss {
			t.Fatal("loss 100% let a packet through")
		}
	}
}

// TestLossCorrelation checks netem's correlated loss: losses come in runs
// (a loss is more likely right after a loss), and — netem's known quirk,
// which the emulator keeps — the overall rate falls below the configured
// one because correlation narrows the spread of the random values.
func TestLossCorrelation(t *testing.T) {
	run := func(corr float64) (rate, afterLoss float64) {
		s := newShaper(emulation.Params{Loss: 10, LossCorrelation: corr}, 7, 8)
		const n = 1_000_000
		var lost, pairs, prevLost int
		prev := false
		for range n {
			_, _, v := s.admit(0, 100, 0)
			l := v == dropLoss
			if l {
				lost++
			}
			if prev {
				prevLost++
				if l {
					pairs++
				}
			}
			prev = l
		}
		return float64(lost) / n, float64(pairs) / float64(prevLost)
	}
	rate0, after0 := run(0)
	rate50, after50 := run(50)
	t.Logf("correlation 0%%: rate %.4f, P(loss|loss) %.4f; 50%%: rate %.4f, P(loss|loss) %.4f", rate0, after0, rate50, after50)
	if math.Abs(after0-rate0) > 0.005 {
		t.Errorf("uncorrelated: P(loss|loss) %.4f differs from the rate %.4f", after0, rate0)
	}
	if after50 < 2*rate50 {
		t.Errorf("correlated: P(loss|loss) %.4f is not well above the rate %.4f", after50, rate50)
	}
	if !(rate50 < rate0) {
		t.Errorf("correlated rate %.4f not below the uncorrelated %.4f as in netem", rate50, rate0)
	}
}

func TestRateSchedule(t *testing.T) {
	t.Run("back to back", func(t *testing.T) {
		// 10000 packets of 1500 bytes arriving at once through 1 Gbit/s
		// leave 12 µs apart, then travel 5 ms.
		s := newShaper(emulation.Params{Rate: 1e9, Delay: 5 * time.Millisecond, Limit: 20_000}, 1, 1)
		for i := range 10_000 {
			rel, held, v := s.admit(0, 1500, i)
			if v != pass {
				t.Fatalf("packet %d dropped", i)
			}
			if want := int64(i+1)*12_000 + int64(5*time.Millisecond); rel != want {
				t.Fatalf("packet %d released at %d, want %d", i, rel, want)
			}
			// It waited behind the i packets before it.
			if want := int64(i) * 12_000; held != want {
				t.Fatalf("packet %d held %d, want %d", i, held, want)
			}
		}
	})
	t.Run("fractional", func(t *testing.T) {
		// 1000 bytes at 3 Mbit/s take 2666666.67 ns: the remainder is
		// carried, so 3000 packets take exactly 8 s.
		s := newShaper(emulation.Params{Rate: 3e6, Limit: 5000}, 1, 1)
		var rel int64
		for i := range 3000 {
			rel, _, _ = s.admit(0, 1000, i)
		}
		if rel != int64(8*time.Second) {
			t.Fatalf("last release %v, want 8s", time.Duration(rel))
		}
	})
	t.Run("idle link", func(t *testing.T) {
		// Packets further apart than their serialization never queue.
		s := newShaper(emulation.Params{Rate: 1e6}, 1, 1)
		for i := range 100 {
			now := int64(i) * int64(time.Second)
			rel, held, _ := s.admit(now, 125, 0)
			if rel-now != int64(time.Millisecond) || held != 0 {
				t.Fatalf("packet %d took %v (held %v), want 1ms (0)", i, time.Duration(rel-now), time.Duration(held))
			}
		}
	})
}

func TestLimitShaper(t *testing.T) {
	s := newShaper(emulation.Params{Limit: 100}, 1, 1)
	passed, dropped := 0, 0
	for range 1000 {
		if _, _, v := s.admit(0, 100, passed); v == pass {
			passed++
		} else if v == dropLimit {
			dropped++
		}
	}
	if passed != 100 || dropped != 900 {
		t.Fatalf("passed %d dropped %d, want 100 and 900", passed, dropped)
	}
}

// TestLimitRated checks that on a rated link the limit bounds the packets
// waiting for the line, not those already on the wire.
func TestLimitRated(t *testing.T) {
	s := newShaper(emulation.Params{Rate: 1e9, Delay: time.Second, Limit: 100}, 1, 1)
	passed := 0
	for range 1000 {
		if _, _, v := s.admit(0, 1500, passed); v == pass {
			passed++
		}
	}
	if passed != 100 {
		t.Fatalf("burst: %d passed, want 100", passed)
	}
	// 100 packets of 12 µs are serialized after 1.2 ms; then they travel
	// for a second, and the buffer is free again.
	for i := range 100 {
		if _, _, v := s.admit(int64(1200*time.Microsecond)+int64(i)*12_000, 1500, passed); v != pass {
			t.Fatalf("packet %d after the backlog drained: %v", i, v)
		}
		passed++
	}
}

func TestFIFOClamp(t *testing.T) {
	for _, reorder := range []bool{false, true} {
		s := newShaper(emulation.Params{Delay: 5 * time.Millisecond, Jitter: 5 * time.Millisecond, Reorder: reorder}, 9, 9)
		var last int64
		inversions, clamped := 0, 0
		for i := range 10_000 {
			now := int64(i) * 10_000
			rel, held, _ := s.admit(now, 100, 0)
			if rel < last {
				inversions++
			}
			// Held is the clamp: what the release adds to the packet's
			// own delay, which jitter keeps within [0, 10 ms).
			if own := rel - held - now; own < 0 || own >= int64(10*time.Millisecond) || (reorder && held != 0) {
				t.Fatalf("packet %d: release %d held %d, own delay %v", i, rel, held, time.Duration(own))
			}
			if held > 0 {
				clamped++
			}
			last = rel
		}
		if !reorder && clamped == 0 {
			t.Errorf("FIFO: no packet was clamped")
		}
		if !reorder && inversions != 0 {
			t.Errorf("FIFO: %d packets overtook their predecessor", inversions)
		}
		if reorder && inversions == 0 {
			t.Errorf("reorder: no packet overtook another")
		}
	}
}

func BenchmarkShaperAdmit(b *testing.B) {
	s := newShaper(emulation.Params{Delay: 5 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.08, Rate: 1e9, Limit: 1 << 30}, 1, 1)
	var now int64
	for b.Loop() {
		now += 12_000
		s.admit(now, 1500, 0)
	}
}

package linkcheck

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/strait-net/strait/lab/emulation"
)

// Check is one line of the comparison: a measured figure, its target and
// whether it is inside the tolerance. Judged is false for figures that are
// only reported.
type Check struct {
	Name      string
	Target    string
	Measured  string
	Tolerance string
	Judged    bool
	Pass      bool
}

// Tolerances of the checks.
const (
	meanTolerance  = 0.03 // relative, for mean delays
	sdTolerance    = 0.15 // relative, for delay standard deviations
	rateTolerance  = 0.05 // relative, for the rate on the wire
	throughputMin  = 0.90 // TCP goodput at least this fraction of the rate
	confidenceZ    = 1.959964
	minMeanSlack   = 200 * time.Microsecond // RTT mean: absolute tolerance when larger than 3 %
	minOneWaySlack = 100 * time.Microsecond
	minSDSlack     = 100 * time.Microsecond // sd: absolute tolerance, for links with little or no jitter
)

// Checks compares every measurement with its target.
func (r Result) Checks() []Check {
	var cs []Check
	mA, sA := r.AtoB.DelayStats()
	mB, sB := r.BtoA.DelayStats()
	// A probe also waits for its own serialization in each direction.
	mA += serialization(r.AtoB, lossSize+28)
	mB += serialization(r.BtoA, lossSize+28)
	if n := len(r.RTT.Samples); n > 0 {
		var rtt, fwd, rev []float64
		for _, s := range r.RTT.Samples {
			rtt = append(rtt, float64(s.RTT))
			fwd = append(fwd, float64(s.Fwd))
			rev = append(rev, float64(s.Rev))
		}
		cs = append(cs,
			meanCheck("rtt mean", mA+mB, rtt, meanTolerance, minMeanSlack),
			sdCheck("rtt sd", time.Duration(math.Hypot(float64(sA), float64(sB))), rtt),
			meanCheck("a-to-b delay mean", mA, fwd, meanTolerance, minOneWaySlack),
			sdCheck("a-to-b delay sd", sA, fwd),
			meanCheck("b-to-a delay mean", mB, rev, meanTolerance, minOneWaySlack),
			sdCheck("b-to-a delay sd", sB, rev),
			Check{Name: "probes returned", Measured: fmt.Sprintf("%d of %d", n, r.RTT.Sent)},
		)
	}
	for _, d := range []struct {
		name string
		p    emulation.Params
		f    Flood
	}{{"a-to-b", r.AtoB, r.Loss.AtoB}, {"b-to-a", r.BtoA, r.Loss.BtoA}} {
		if d.f.Sent == 0 {
			continue
		}
		lost := d.f.Sent - min(d.f.Sent, d.f.Received)
		lo, hi := wilson(lost, d.f.Sent)
		c := Check{
			Name:      d.name + " loss",
			Target:    emulation.FormatPercent(d.p.Loss),
			Measured:  fmt.Sprintf("%.4f%% (%d of %d)", 100*float64(lost)/float64(d.f.Sent), lost, d.f.Sent),
			Tolerance: fmt.Sprintf("95%% CI %.4f–%.4f%%", 100*lo, 100*hi),
			Judged:    true,
		}
		target := d.p.Loss / 100
		c.Pass = target >= lo && target <= hi
		if d.p.LossCorrelation != 0 {
			c.Tolerance += " (correlated: netem's model loses less than the rate)"
			c.Judged, c.Pass = false, false
		}
		if d.f.RcvbufErrors > d.f.RcvbufBefore {
			c.Tolerance += fmt.Sprintf("; host socket drops %d", d.f.RcvbufErrors-d.f.RcvbufBefore)
		}
		cs = append(cs, c)
	}
	for _, d := range []struct {
		name string
		p    emulation.Params
		b    BulkReport
	}{{"a-to-b", r.AtoB, r.Up}, {"b-to-a", r.BtoA, r.Down}} {
		if d.b.Bytes == 0 {
			continue
		}
		goodput := d.b.goodput()
		cs = append(cs, Check{
			Name:     d.name + " tcp goodput",
			Measured: fmt.Sprintf("%.1f Mbit/s (%s, %d retransmits)", goodput/1e6, d.b.CC, d.b.Retransmits),
		})
		last := &cs[len(cs)-1]
		if d.p.Rate != 0 {
			last.Target = fmt.Sprintf("≥ %.0f Mbit/s", throughputMin*float64(d.p.Rate)/1e6)
			last.Tolerance = fmt.Sprintf("%.0f%% of rate", 100*throughputMin)
			last.Judged = true
			last.Pass = goodput >= throughputMin*float64(d.p.Rate)
			if d.b.MSS > 0 {
				wire := goodput * float64(d.b.MSS+d.b.HeaderBytes) / float64(d.b.MSS)
				cs = append(cs, Check{
					Name:      d.name + " rate (IP bytes)",
					Target:    emulation.FormatRate(d.p.Rate),
					Measured:  fmt.Sprintf("%.1f Mbit/s", wire/1e6),
					Tolerance: fmt.Sprintf("±%.0f%%", 100*rateTolerance),
					Judged:    true,
					Pass:      math.Abs(wire/float64(d.p.Rate)-1) <= rateTolerance,
				})
			}
		}
		if d.b.SHA256Match != nil {
			cs = append(cs, Check{Name: d.name + " tcp integrity", Target: "sha256 equal",
				Measured: fmt.Sprint(*d.b.SHA256Match), Judged: true, Pass: *d.b.SHA256Match})
		}
	}
	return cs
}

// goodput is the receiver's payload rate in bit/s, over the steady part of
// the transfer when there is one (after the first second: slow start).
func (b BulkReport) goodput() float64 {
	if b.SteadySecond > 0.5 {
		return float64(b.SteadyBytes) * 8 / b.SteadySecond
	}
	if b.Seconds > 0 {
		return float64(b.Bytes) * 8 / b.Seconds
	}
	return 0
}

// Pass reports whether every judged check passed and nothing failed to run.
func (r Result) Pass() bool {
	if len(r.ProbeErrors) > 0 {
		return false
	}
	for _, c := range r.Checks() {
		if c.Judged && !c.Pass {
			return false
		}
	}
	return true
}

// Table writes the comparison, one check per line.
func (r Result) Table(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tTARGET\tMEASURED\tTOLERANCE\tVERDICT")
	for _, c := range r.Checks() {
		v := "-"
		if c.Judged {
			v = "FAIL"
			if c.Pass {
				v = "PASS"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, dash(c.Target), c.Measured, dash(c.Tolerance), v)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nprobes every %v; loss flood %d pps per direction\n", r.ProbeGap, r.LossPPS)
	for _, e := range r.ProbeErrors {
		fmt.Fprintln(w, "error:", e)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func serialization(p emulation.Params, size int) time.Duration {
	if p.Rate == 0 {
		return 0
	}
	return time.Duration(float64(size*8) / float64(p.Rate) * 1e9)
}

func meanSD(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss / float64(len(xs)-1))
}

func ms(ns float64) string { return fmt.Sprintf("%.3f ms", ns/1e6) }

func meanCheck(name string, target time.Duration, xs []float64, rel float64, slack time.Duration) Check {
	m, _ := meanSD(xs)
	tol := max(rel*float64(target), float64(slack))
	return Check{
		Name: name, Target: ms(float64(target)), Measured: ms(m),
		Tolerance: fmt.Sprintf("±%.0f%% or ±%v", 100*rel, slack),
		Judged:    true, Pass: math.Abs(m-float64(target)) <= tol,
	}
}

func sdCheck(name string, target time.Duration, xs []float64) Check {
	_, sd := meanSD(xs)
	tol := max(sdTolerance*float64(target), float64(minSDSlack))
	return Check{
		Name: name, Target: ms(float64(target)), Measured: ms(sd),
		Tolerance: fmt.Sprintf("±%.0f%% or ±%v", 100*sdTolerance, minSDSlack),
		Judged:    true, Pass: math.Abs(sd-float64(target)) <= tol,
	}
}

// wilson is the Wilson score 95 % interval of a proportion k/n.
func wilson(k, n uint64) (lo, hi float64) { return wilsonZ(k, n, confidenceZ) }

// wilsonZ is the Wilson score interval for the normal quantile z.
func wilsonZ(k, n uint64, z float64) (lo, hi float64) {
	if n == 0 {
		return 0, 1
	}
	p := float64(k) / float64(n)
	nf := float64(n)
	den := 1 + z*z/nf
	center := (p + z*z/(2*nf)) / den
	half := z / den * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf))
	return max(0, center-half), min(1, center+half)
}

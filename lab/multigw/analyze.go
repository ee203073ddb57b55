package multigw

import (
	"math"
	"slices"
	"time"

	"github.com/strait-net/strait/load"
)

// Stream-mode errors that mean the connection itself ended (load.probeStream
// marks the probes in flight and those given to it while it redials).
const (
	errConnEnded = "connection ended before the reply"
	errConnDown  = "connection down"
	errLate      = "reply after the timeout"
)

// lateWarn is how late the probe sender may run before the result says the
// host could not keep the schedule.
const lateWarn = 50 * time.Millisecond

// analyzeFailover computes one victim's result from the probes. Every
// window is by the probes' send times, so a run in which the sender fell
// behind compares like with like: the loss after the kill and after the
// restart is counted over windows as long as the one before the kill, and
// each is also given above the loss rate before the kill (what the host
// loses anyway). A long-lived connection counts as broken by the kill only
// when it broke within timeout of the kill; probes lost on every other
// connection, including ones that broke before the kill or after the
// restart, are losses on survivors. The windows after the restart start
// at resume: the restart, or the end of the experiment's rejoin pause, in
// which no new connection was sent.
func analyzeFailover(samples []load.ProbeSample, kill, restart, resume time.Time, rate int, timeout time.Duration) *FailoverResult {
	r := &FailoverResult{Rate: rate}
	per := 1000 / float64(rate) // ms per probe
	half := func(x float64) float64 { return math.Round(x*2) / 2 }
	win := restart.Sub(kill)
	in := func(t, from time.Time, d time.Duration) bool { return !t.Before(from) && t.Before(from.Add(d)) }

	// When each stream connection first broke.
	brokeAt := map[string]time.Time{}
	conns := map[string]bool{}
	for _, s := range samples {
		if s.Mode != load.ProbeStream {
			continue
		}
		conns[s.Conn] = true
		if s.Err == errConnEnded || s.Err == errConnDown {
			if t, ok := brokeAt[s.Conn]; !ok || s.Sent.Before(t) {
				brokeAt[s.Conn] = s.Sent
			}
		}
	}
	byKill := map[string]bool{}
	for c, t := range brokeAt {
		if !t.Before(kill.Add(-timeout)) && t.Before(kill.Add(timeout)) {
			byKill[c] = true
		} else {
			r.BrokenOther++
		}
	}
	r.Conns, r.BrokenConns = len(conns), len(byKill)

	var newFrom time.Time // the first new-connection probe
	for _, s := range samples {
		switch s.Mode {
		case load.ProbeNew:
			r.NewSent++
			if newFrom.IsZero() || s.Sent.Before(newFrom) {
				newFrom = s.Sent
			}
			if !s.Lost() {
				continue
			}
			switch {
			case s.Sent.Before(kill):
				r.NewLostBefore++
			case s.Sent.Before(restart):
				r.NewLostKill++
			default:
				r.NewLostRestart++
			}
			if in(s.Sent, kill, excessWindow) {
				r.NewLost500++
			}
			if in(s.Sent, resume, excessWindow) {
				r.NewLost500Restart++
			}
			if in(s.Sent, resume, win) {
				r.NewLostRestartWin++
			}
		case load.ProbeStream:
			r.StreamSent++
			if !s.Lost() {
				continue
			}
			if byKill[s.Conn] {
				r.LostOnBroken++
				continue
			}
			r.LostOnSurvivors++
			if s.Err == errLate {
				r.LateOnSurvivors++
			}
		}
	}
	if kill.After(newFrom) {
		rateBefore := r.NewLostBefore / float64(kill.Sub(newFrom)) // per ns
		r.NewLostBefore = rateBefore * float64(win)
		bg500 := rateBefore * float64(excessWindow)
		r.NewExcess500Ms = half(max(0, float64(r.NewLost500)-bg500) * per)
		r.NewExcess500RestartMs = half(max(0, float64(r.NewLost500Restart)-bg500) * per)
	}
	r.NewRecoveryKillMs = half(float64(r.NewLostKill) * per)
	r.NewExcessKillMs = half(max(0, float64(r.NewLostKill)-r.NewLostBefore) * per)
	r.NewRecoveryRestMs = half(float64(r.NewLostRestartWin) * per)
	r.NewExcessRestartMs = half(max(0, float64(r.NewLostRestartWin)-r.NewLostBefore) * per)
	r.StreamRecoveryMs = half(float64(r.LostOnBroken+r.LostOnSurvivors) * per)
	r.NewSendLateP99Ms, r.NewSendLateMaxMs = sendLate(samples, load.ProbeNew, rate)
	r.StreamSendLateP99Ms, r.StreamSendLateMaxMs = sendLate(samples, load.ProbeStream, rate)
	return r
}

// sendLate is how far behind its schedule the probe sender sent a mode's
// probes (99th percentile and worst, ms). Probe seq is due (seq-1)/rate
// after probe 1; a sender that keeps the schedule on an idle host is late
// by well under a millisecond, so large values mean the host was too busy
// to run it, and the losses it saw are not all the failover's.
func sendLate(samples []load.ProbeSample, mode string, rate int) (p99, worst float64) {
	var first time.Time
	for _, s := range samples {
		if s.Mode == mode && s.Seq == 1 {
			first = s.Sent
		}
	}
	if first.IsZero() {
		return 0, 0
	}
	interval := time.Second / time.Duration(rate)
	var late []time.Duration
	for _, s := range samples {
		if s.Mode == mode {
			late = append(late, max(0, s.Sent.Sub(first.Add(time.Duration(s.Seq-1)*interval))))
		}
	}
	slices.Sort(late)
	return ms(late[len(late)*99/100]), ms(late[len(late)-1])
}

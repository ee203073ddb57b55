package multigw

import (
	"fmt"
	"testing"
	"time"

	"github.com/strait-net/strait/load"
)

// synthetic builds a run at rate probes/s per mode over d: new-connection
// probes are lost when lostNew says so; stream probes go round-robin over
// conns, whose fate brk gives (the send time from which the connection is
// broken, zero for never; a broken connection reconnects under a new name
// after redial).
func synthetic(t0 time.Time, rate int, d time.Duration, lostNew func(at time.Duration) bool, conns int, brk map[int]time.Duration, redial time.Duration, late func(at time.Duration) bool) []load.ProbeSample {
	var out []load.ProbeSample
	interval := time.Second / time.Duration(rate)
	for seq := uint64(1); time.Duration(seq-1)*interval < d; seq++ {
		at := time.Duration(seq-1) * interval
		s := load.ProbeSample{Mode: load.ProbeNew, Seq: seq, Sent: t0.Add(at)}
		if !lostNew(at) {
			s.Recv = s.Sent.Add(time.Millisecond)
		} else {
			s.Err = "dial tcp: i/o timeout"
		}
		out = append(out, s)

		c := int(seq) % conns
		st := load.ProbeSample{Mode: load.ProbeStream, Seq: seq, Sent: t0.Add(at), Conn: fmt.Sprintf("%d:a", c)}
		b, ok := brk[c]
		switch {
		case ok && at >= b && at < b+redial:
			st.Err = errConnDown
		case ok && at >= b+redial:
			st.Conn = fmt.Sprintf("%d:b", c)
			st.Recv = st.Sent.Add(time.Millisecond)
		case late != nil && late(at):
			st.Err = errLate
		default:
			st.Recv = st.Sent.Add(time.Millisecond)
		}
		out = append(out, st)
	}
	return out
}

func TestAnalyzeFailoverWindows(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	kill, restart := t0.Add(2*time.Second), t0.Add(4*time.Second)
	// Background: 1 in 10 new connections lost all along; an outage of
	// 40 ms right after the kill, and none at the restart; the run lasts
	// 10 s, so everything after the restart is a 6 s window.
	lost := func(at time.Duration) bool {
		return (at >= 2*time.Second && at < 2040*time.Millisecond) || (at/time.Millisecond)%10 == 0
	}
	// Connection 1 breaks at the kill, connection 2 after the restart.
	brk := map[int]time.Duration{1: 2 * time.Second, 2: 5 * time.Second}
	r := analyzeFailover(synthetic(t0, 1000, 10*time.Second, lost, 4, brk, 100*time.Millisecond, nil), kill, restart, restart, 1000, time.Second)

	if r.NewLost500 != 40+46 { // 40 of the outage, 1 in 10 of the other 460 ms
		t.Errorf("lost in the 500 ms after the kill = %d, want 86", r.NewLost500)
	}
	// The background rate predicts 50 of them.
	if r.NewExcess500Ms != 36 {
		t.Errorf("excess after the kill = %v ms, want 36", r.NewExcess500Ms)
	}
	// The restart cost nothing above the background, in either window,
	// although 600 probes were lost after it until the end.
	if r.NewExcessRestartMs != 0 || r.NewExcess500RestartMs != 0 {
		t.Errorf("excess after the restart = %v ms (window) / %v ms (500 ms), want 0", r.NewExcessRestartMs, r.NewExcess500RestartMs)
	}
	if r.NewLostRestartWin != 200 || r.NewLostRestart != 600 {
		t.Errorf("lost after the restart = %d in its window, %d to the end; want 200, 600", r.NewLostRestartWin, r.NewLostRestart)
	}
	if r.BrokenConns != 1 || r.BrokenOther != 1 {
		t.Errorf("broken at the kill %d, at another time %d; want 1, 1", r.BrokenConns, r.BrokenOther)
	}
	// The 100 ms redial of connection 1 loses its 25 probes; connection 2
	// broke after the restart, so its 25 count against the survivors.
	if r.LostOnBroken != 25 || r.LostOnSurvivors != 25 {
		t.Errorf("lost on broken %d, on survivors %d; want 25, 25", r.LostOnBroken, r.LostOnSurvivors)
	}
	if r.NewSendLateP99Ms != 0 || r.StreamSendLateMaxMs != 0 {
		t.Errorf("send lateness %v/%v ms on a perfect schedule", r.NewSendLateP99Ms, r.StreamSendLateMaxMs)
	}
}

func TestAnalyzeFailoverLateRepliesAndLateSender(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	kill, restart := t0.Add(time.Second), t0.Add(2*time.Second)
	late := func(at time.Duration) bool { return at >= 2500*time.Millisecond && at < 2600*time.Millisecond }
	samples := synthetic(t0, 1000, 3*time.Second, func(time.Duration) bool { return false }, 4, nil, 0, late)
	// The sender stalled for 300 ms before probe 1001 of each mode.
	for i := range samples {
		if samples[i].Seq >= 1001 {
			samples[i].Sent = samples[i].Sent.Add(300 * time.Millisecond)
			if !samples[i].Recv.IsZero() {
				samples[i].Recv = samples[i].Recv.Add(300 * time.Millisecond)
			}
		}
	}
	r := analyzeFailover(samples, kill, restart, restart, 1000, time.Second)
	if r.LostOnSurvivors != 100 || r.LateOnSurvivors != 100 || r.BrokenConns != 0 {
		t.Errorf("survivors lost %d, late %d, broken %d; want 100, 100, 0", r.LostOnSurvivors, r.LateOnSurvivors, r.BrokenConns)
	}
	if r.NewSendLateMaxMs != 300 || r.StreamSendLateP99Ms != 300 {
		t.Errorf("sender late max %v ms (new), p99 %v ms (stream); want 300, 300", r.NewSendLateMaxMs, r.StreamSendLateP99Ms)
	}
}

// TestAnalyzeFailoverRejoinPause: with a pause after the restart (no new
// connection sent in it), the windows after the restart start at its end:
// a burst of 30 lost 100 ms after the pause lies in both, and the 500 ms
// window is not spent on the empty pause.
func TestAnalyzeFailoverRejoinPause(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	kill, restart, resume := t0.Add(2*time.Second), t0.Add(4*time.Second), t0.Add(5500*time.Millisecond)
	lost := func(at time.Duration) bool { return at >= 5600*time.Millisecond && at < 5630*time.Millisecond }
	var samples []load.ProbeSample
	for _, s := range synthetic(t0, 1000, 10*time.Second, lost, 4, nil, 0, nil) {
		if s.Mode == load.ProbeNew && !s.Sent.Before(restart) && s.Sent.Before(resume) {
			continue // paused
		}
		samples = append(samples, s)
	}
	r := analyzeFailover(samples, kill, restart, resume, 1000, time.Second)
	if r.NewLost500Restart != 30 || r.NewLostRestartWin != 30 || r.NewLostRestart != 30 {
		t.Errorf("lost after the pause: %d in 500 ms, %d in the window, %d to the end; want 30 each", r.NewLost500Restart, r.NewLostRestartWin, r.NewLostRestart)
	}
	if r.NewSent != 10000-1500 {
		t.Errorf("new sent %d, want 8500", r.NewSent)
	}
}

package tunnel

import (
	"log/slog"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// TestPingRule walks the keepalive decision through the cases the comment
// on pingRule names, one interval at a time.
func TestPingRule(t *testing.T) {
	const iv = 10 * time.Millisecond
	type tick struct {
		silent time.Duration // since the last frame of any kind
		heard  uint64        // frames received that were not pongs
		want   bool
	}
	cases := []struct {
		name   string
		client bool
		ticks  []tick
	}{
		{"dialer of an idle session pings every interval", true, []tick{
			// Only pongs arrive: heard never moves.
			{2 * time.Millisecond, 0, true}, {2 * time.Millisecond, 0, true}, {3 * time.Millisecond, 0, true},
		}},
		{"dialer of a busy session does not ping", true, []tick{
			{0, 5, false}, {0, 9, false}, {time.Millisecond, 40, false},
		}},
		{"dialer pings the first interval the data stops", true, []tick{
			{0, 5, false}, {iv, 5, true}, {2 * iv, 5, true}, {0, 6, false},
		}},
		{"dialer counts the peer's pings as unasked", true, []tick{
			{time.Millisecond, 1, false}, {time.Millisecond, 2, false},
		}},
		{"acceptor answers and does not ping", false, []tick{
			{iv / 2, 1, false}, {iv, 2, false}, {0, 3, false}, {2 * iv, 3, false},
		}},
		{"acceptor pings after a quarter of the timeout of silence", false, []tick{
			{200 * time.Millisecond, 0, false}, {250 * time.Millisecond, 0, true}, {260 * time.Millisecond, 0, true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := pingRule{client: c.client, interval: iv, timeout: time.Second}
			now := time.Duration(0)
			for i, tk := range c.ticks {
				now += iv
				got := r.needPing(now, tk.silent, tk.heard)
				if got != tk.want {
					t.Fatalf("tick %d (silent %v, heard %d): ping %v, want %v", i, tk.silent, tk.heard, got, tk.want)
				}
				if got {
					r.lastPing = now
				}
			}
		})
	}
}

// TestPingRuleRTTPeriod: a session that never needs a probe still pings
// every rttPingPeriod, on either side, so its RTT stays current.
func TestPingRuleRTTPeriod(t *testing.T) {
	const iv = 10 * time.Millisecond
	for _, client := range []bool{true, false} {
		r := pingRule{client: client, interval: iv, timeout: time.Second}
		pings := 0
		heard := uint64(0)
		end := 10 * rttPingPeriod
		for now := iv; now <= end; now += iv {
			heard++ // busy: something unasked every interval
			if r.needPing(now, 0, heard) {
				pings++
				r.lastPing = now
			}
		}
		if want := int(end / rttPingPeriod); pings != want {
			t.Errorf("client %v: %d pings in %v of traffic, want %d (one per %v)", client, pings, end, want, rttPingPeriod)
		}
	}
}

// TestUntilDecisionSkipsNoPing: the keepalive may sleep for untilDecision
// only if needPing would have said no at every interval in between, for
// any state, while the silence grows (a frame arriving only makes a ping
// less due).
func TestUntilDecisionSkipsNoPing(t *testing.T) {
	const iv = 10 * time.Millisecond
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		now := time.Duration(rng.Int64N(int64(10*time.Second))) + rttPingPeriod
		r := pingRule{interval: iv, timeout: time.Duration(1+rng.IntN(20)) * 100 * time.Millisecond,
			lastPing: now - time.Duration(rng.Int64N(int64(rttPingPeriod)))}
		silent := time.Duration(rng.Int64N(int64(2 * time.Second)))
		sleep := r.untilDecision(now, silent)
		if sleep < iv {
			t.Fatalf("untilDecision = %v, below the interval %v", sleep, iv)
		}
		if sleep == iv {
			continue // the old schedule: nothing skipped
		}
		for d := iv; d < sleep; d += iv {
			probe := r // needPing records what it heard
			if probe.needPing(now+d, silent+d, 0) {
				t.Fatalf("state %+v, silent %v: sleeps %v but a ping was due after %v", r, silent, sleep, d)
			}
		}
	}
	// A dialer that probes for itself decides every interval.
	r := pingRule{client: true, interval: iv, timeout: time.Second}
	if got := r.untilDecision(time.Second, 0); got != iv {
		t.Errorf("dialer: untilDecision = %v, want the interval %v", got, iv)
	}
}

// TestIdleSessionsSleep: two idle sessions whose probing is left to a pool
// and to the dialer must not wake their keepalive every interval: the
// keepalive loop must actually sleep for untilDecision, which
// TestUntilDecisionSkipsNoPing checks on its own.
func TestIdleSessionsSleep(t *testing.T) {
	a, b := net.Pipe()
	cfg := (&Config{Logger: slog.New(slog.DiscardHandler), KeepaliveInterval: 10 * time.Millisecond,
		KeepaliveTimeout: time.Second}).withDefaults()
	dialer := newSession(a, nil, true, "b", "", "", cfg)
	acceptor := newSession(b, nil, false, "a", "", "", cfg)
	dialer.takeProbes()
	defer dialer.Close()
	defer acceptor.Close()
	const idle = 1500 * time.Millisecond
	time.Sleep(idle)
	for _, s := range []*session{dialer, acceptor} {
		// Every interval would be 150 wake-ups; sleeping to the next
		// decision is a handful (silence checks at a quarter timeout, the
		// RTT ping every second). A starved host only lowers the count,
		// so the bound cannot fail on a slow machine.
		if wakes := s.st.keepaliveWakes.Load(); wakes > 30 {
			t.Errorf("%s session: keepalive woke %d times in %v idle", s.peer, wakes, idle)
		}
	}
}

package tunnel

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync/atomic"
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
		idle   bool // no streams
		ticks  []tick
	}{
		{"dialer of an idle session pings every interval", true, false, []tick{
			// Only pongs arrive: heard never moves.
			{2 * time.Millisecond, 0, true}, {2 * time.Millisecond, 0, true}, {3 * time.Millisecond, 0, true},
		}},
		{"dialer of a busy session does not ping", true, false, []tick{
			{0, 5, false}, {0, 9, false}, {time.Millisecond, 40, false},
		}},
		{"dialer pings the first interval the data stops", true, false, []tick{
			{0, 5, false}, {iv, 5, true}, {2 * iv, 5, true}, {0, 6, false},
		}},
		{"dialer counts the peer's pings as unasked", true, false, []tick{
			{time.Millisecond, 1, false}, {time.Millisecond, 2, false},
		}},
		{"acceptor answers and does not ping", false, false, []tick{
			{iv / 2, 1, false}, {iv, 2, false}, {0, 3, false}, {2 * iv, 3, false},
		}},
		{"acceptor pings after a quarter of the timeout of silence", false, false, []tick{
			{200 * time.Millisecond, 0, false}, {250 * time.Millisecond, 0, true}, {260 * time.Millisecond, 0, true},
		}},
		{"acceptor of an idle session waits a quarter of the idle limit", false, true, []tick{
			{250 * time.Millisecond, 0, false}, {time.Second, 0, false}, {1990 * time.Millisecond, 0, false},
			{2 * time.Second, 0, true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := pingRule{client: c.client, idle: c.idle, interval: iv, timeout: time.Second}
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
	// A session without streams needs no RTT sample: an acceptor (or a
	// pooled dialer) hearing the peer's pings never pings back unasked.
	r := pingRule{idle: true, interval: iv, timeout: time.Second}
	for now := iv; now <= 10*rttPingPeriod; now += iv {
		if r.needPing(now, now%(2*time.Second)/2, uint64(now/iv)) {
			t.Fatalf("idle session pinged at %v for its RTT", now)
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
			lastPing: now - time.Duration(rng.Int64N(int64(rttPingPeriod))), idle: rng.IntN(2) == 0}
		silent := time.Duration(rng.Int64N(int64(20 * time.Second)))
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

// muteConn discards what it would write while muted: a peer that fell
// silent without closing the connection (it still reads, so that the pipe
// does not block the other end).
type muteConn struct {
	net.Conn
	muted atomic.Bool
}

func (m *muteConn) Write(p []byte) (int, error) {
	if m.muted.Load() {
		return len(p), nil
	}
	return m.Conn.Write(p)
}

// TestIdleSessionSilence: a session without streams pings only after a
// quarter of the idle limit (idleSilenceFactor keepalive timeouts) of
// silence; a stream opened on it after more than a timeout of silence is
// not taken for a dead peer's, nor is the busy session that then carries
// nothing for a few timeouts; and a peer that falls silent still ends it,
// after the idle limit rather than one timeout.
func TestIdleSessionSilence(t *testing.T) {
	const timeout = 100 * time.Millisecond
	a, b := net.Pipe()
	mb := &muteConn{Conn: b}
	cfg := (&Config{Logger: slog.New(slog.DiscardHandler), KeepaliveInterval: 10 * time.Millisecond,
		KeepaliveTimeout: timeout}).withDefaults()
	dialer := newSession(a, nil, true, "b", "", "", cfg)
	acceptor := newSession(mb, nil, false, "a", "", "", cfg)
	dialer.takeProbes() // as in a Pool, which is not probing here
	defer dialer.Close()
	defer acceptor.Close()

	// Six timeouts idle: with a ping after a quarter timeout of silence
	// that was over twenty pings; now the first ping of each side and
	// one per quarter idle limit (200 ms) between them. A starved host
	// only lowers the count.
	time.Sleep(6 * timeout)
	if p := dialer.Stats().PingsSent + acceptor.Stats().PingsSent; p > 8 {
		t.Errorf("idle sessions sent %d pings in %v (keepalive timeout %v)", p, 6*timeout, timeout)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := dialer.OpenStream(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := acceptor.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A quiet stream: the sessions, just busy, must ping by the busy
	// rule now rather than sleep out the idle wait and find a timeout of
	// silence when they wake.
	time.Sleep(4 * timeout)
	for _, s := range []*session{dialer, acceptor} {
		if err := s.Err(); err != nil {
			t.Fatalf("%s session with a quiet stream ended: %v", s.peer, err)
		}
	}
	if _, err := st.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(acc, make([]byte, 1)); err != nil {
		t.Fatalf("stream opened after an idle stretch: %v", err)
	}
	st.Reset("done")
	for dialer.openStreams() != 0 || acceptor.openStreams() != 0 {
		if ctx.Err() != nil {
			t.Fatal("the stream never ended")
		}
		time.Sleep(time.Millisecond)
	}

	mb.muted.Store(true)
	start := time.Now()
	select {
	case <-dialer.Done():
	case <-ctx.Done():
		t.Fatal("an idle session to a silent peer never ended")
	}
	if !errors.Is(dialer.Err(), ErrPeerUnresponsive) {
		t.Errorf("dialer Err() = %v, want ErrPeerUnresponsive", dialer.Err())
	}
	// Timers only fire late, never early: ending before two timeouts
	// would be the busy session's limit.
	if d := time.Since(start); d < 2*timeout {
		t.Errorf("idle session ended %v after its peer fell silent, want the idle limit (%v)", d, idleSilenceFactor*timeout)
	}
}

package tunnel

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// silentSession is a Session whose received-frame count the test sets:
// the health check reads nothing else of an outbound session.
type silentSession struct {
	frames atomic.Uint64
	done   chan struct{}
}

func (s *silentSession) OpenStream(context.Context, []byte) (Stream, error) { return nil, io.EOF }
func (s *silentSession) AcceptStream(context.Context) (Stream, error)       { return nil, io.EOF }
func (s *silentSession) Peer() string                                       { return "b" }
func (s *silentSession) RTT() time.Duration                                 { return 0 }
func (s *silentSession) Stats() Stats                                       { return Stats{FramesReceived: s.frames.Load()} }
func (s *silentSession) Close() error                                       { return nil }
func (s *silentSession) Done() <-chan struct{}                              { return s.done }
func (s *silentSession) Err() error                                         { return nil }

// noTransport is never dialed: the test puts the sessions in the slots.
type noTransport struct{}

func (noTransport) Dial(context.Context, string) (Session, error) { return nil, io.EOF }
func (noTransport) Listen(string) (Listener, error)               { return nil, io.EOF }

// TestPoolHealthLateCheckRevivesNothing drives the health check with its
// own clock: a gateway found silent stays dead through checks that run
// late (this process stalled) and through a round in which every gateway
// is silent, and comes back only with a frame read. A late check that
// revived it sent new packet-mode flows into a dead link while the other
// gateway was fine (gateway TestPacketModeHealth under a loaded CI run).
func TestPoolHealthLateCheckRevivesNothing(t *testing.T) {
	const interval = 100 * time.Millisecond
	p, err := NewPool(PoolConfig{Transport: noTransport{}, Peer: "b", Addrs: []string{"b1:4443", "b2:4443"},
		SessionsPerAddr: 1, ProbeInterval: interval, ProbeMisses: 3, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	sess := map[string]*silentSession{}
	for _, sl := range p.slots {
		s := &silentSession{done: make(chan struct{})}
		sess[sl.addr] = s
		sl.sess = s
	}
	live := func() map[string]bool {
		m := map[string]bool{}
		for _, g := range p.Gateways() {
			m[g.Addr] = g.Live
		}
		return m
	}
	want := func(step string, b1, b2 bool) {
		t.Helper()
		if got := live(); got["b1:4443"] != b1 || got["b2:4443"] != b2 {
			t.Fatalf("%s: live %v, want b1 %v b2 %v", step, got, b1, b2)
		}
	}
	now := time.Unix(1000, 0)
	check := func(d time.Duration) {
		now = now.Add(d)
		p.checkHealth(now)
	}
	check(0)
	want("new sessions", true, true)
	// b1 answers every interval, b2 falls silent.
	for range 4 {
		sess["b1:4443"].frames.Add(1)
		check(interval)
	}
	want("b2 silent for the window", true, false)
	// A stall: the next check comes 5 intervals late, nothing was read.
	check(5 * interval)
	want("late check", true, false)
	// Both silent (a stall of the readers, not of the checks).
	for range 4 {
		check(interval)
	}
	want("all silent", true, false)
	// b2 answers again.
	sess["b2:4443"].frames.Add(1)
	sess["b1:4443"].frames.Add(1)
	check(interval)
	want("b2 heard", true, true)
}

// intervalSession is a silentSession that records the keepalive interval a
// Pool gives it.
type intervalSession struct {
	silentSession
	interval atomic.Int64
	set      atomic.Int32 // calls
}

func (s *intervalSession) setKeepaliveInterval(d time.Duration) {
	s.interval.Store(int64(d))
	s.set.Add(1)
}

// TestPoolSetProbeInterval: a longer probe interval reaches the pool's
// sessions (present and later ones) and its silence window — a gateway
// silent for the old window stays live, one silent for the new window is
// still taken out — and 0 restores the configuration's, sessions
// included (docs/packet.md, "What the gateway processes cost").
func TestPoolSetProbeInterval(t *testing.T) {
	const interval, longer = 10 * time.Millisecond, 200 * time.Millisecond
	p, err := NewPool(PoolConfig{Transport: noTransport{}, Peer: "b", Addrs: []string{"b1:4443", "b2:4443"},
		SessionsPerAddr: 1, ProbeInterval: interval, ProbeMisses: 3, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	sess := map[string]*intervalSession{}
	for _, sl := range p.slots[:1] {
		s := &intervalSession{silentSession: silentSession{done: make(chan struct{})}}
		sess[sl.addr] = s
		sl.sess = s
	}
	now := time.Unix(1000, 0)
	check := func(d time.Duration) {
		now = now.Add(d)
		p.checkHealth(now)
	}
	live := func(addr string) bool {
		for _, g := range p.Gateways() {
			if g.Addr == addr {
				return g.Live
			}
		}
		t.Fatalf("no gateway %s", addr)
		return false
	}
	check(0)
	p.SetProbeInterval(longer)
	if got := p.ProbeInterval(); got != longer {
		t.Fatalf("ProbeInterval %v after SetProbeInterval(%v)", got, longer)
	}
	if got := time.Duration(sess["b1:4443"].interval.Load()); got != longer {
		t.Fatalf("b1's session keepalive %v, want %v", got, longer)
	}
	// b2's session comes up later: the next check hands it over.
	late := &intervalSession{silentSession: silentSession{done: make(chan struct{})}}
	p.slots[1].sess = late
	check(0)
	if got := time.Duration(late.interval.Load()); got != longer {
		t.Fatalf("a later session's keepalive %v, want %v", got, longer)
	}
	if !live("b1:4443") || !live("b2:4443") {
		t.Fatal("gateways not live with their new sessions")
	}
	// b2 answers, b1 is silent for more than the old window (3 × 10 ms)
	// but less than the new one (3 × 200 ms): still live.
	for range 10 {
		late.frames.Add(1)
		check(interval * 5)
	}
	if !live("b1:4443") {
		t.Fatal("b1 taken out after 500ms of silence with a 600ms window")
	}
	// Silent past the new window: a dead gateway is still found.
	for range 3 {
		late.frames.Add(1)
		check(longer)
	}
	if live("b1:4443") {
		t.Fatal("b1 still live after 1.1s of silence with a 600ms window")
	}
	p.SetProbeInterval(0)
	if got := p.ProbeInterval(); got != interval {
		t.Fatalf("ProbeInterval %v after SetProbeInterval(0), want the configuration's %v", got, interval)
	}
	for addr, s := range map[string]*intervalSession{"b1": sess["b1:4443"], "b2": late} {
		if got := s.interval.Load(); got != 0 {
			t.Fatalf("%s's session keepalive %v after SetProbeInterval(0), want 0 (its own)", addr, time.Duration(got))
		}
	}
	// Setting what is in force again touches no session.
	n := late.set.Load()
	p.SetProbeInterval(0)
	if late.set.Load() != n {
		t.Fatal("an unchanged interval was handed to the sessions again")
	}
}

// TestPoolShorterProbeIntervalKeepsLiveGateways: going back from a long
// probe interval to the short one must not take out a gateway that was
// live under the long one only because its last frame is older than the
// short window: the old window holds for one more of its length, and a
// gateway silent past that is still found.
func TestPoolShorterProbeIntervalKeepsLiveGateways(t *testing.T) {
	const interval, longer = 10 * time.Millisecond, 200 * time.Millisecond
	p, err := NewPool(PoolConfig{Transport: noTransport{}, Peer: "b", Addrs: []string{"b1:4443", "b2:4443"},
		SessionsPerAddr: 1, ProbeInterval: interval, ProbeMisses: 3, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	b1 := &intervalSession{silentSession: silentSession{done: make(chan struct{})}}
	b2 := &intervalSession{silentSession: silentSession{done: make(chan struct{})}}
	p.slots[0].sess, p.slots[1].sess = b1, b2
	now := time.Unix(1000, 0)
	check := func(d time.Duration) {
		now = now.Add(d)
		b2.frames.Add(1) // b2 always answers
		p.checkHealth(now)
	}
	live := func() bool {
		for _, g := range p.Gateways() {
			if g.Addr == "b1:4443" {
				return g.Live
			}
		}
		t.Fatal("no gateway b1")
		return false
	}
	check(0)
	p.SetProbeInterval(longer)
	for range 3 { // b1 silent for 300 ms of a 600 ms window
		check(100 * time.Millisecond)
	}
	if !live() {
		t.Fatal("b1 taken out within the long window")
	}
	p.SetProbeInterval(0)
	for i := range 5 {
		check(interval)
		if !live() {
			t.Fatalf("b1 taken out %v after going back to %v probes: judged by the new window at once", time.Duration(i+1)*interval, interval)
		}
	}
	for range 70 { // past the old window's grace: silence is silence again
		check(interval)
	}
	if live() {
		t.Fatal("b1 still live after 1 s of silence")
	}
}

// TestSessionKeepaliveIntervalBounds: a Pool's interval is held below a
// quarter of the keepalive timeout, and one not longer than the session's
// own configured interval leaves that in force.
func TestSessionKeepaliveIntervalBounds(t *testing.T) {
	s := &session{cfg: &Config{KeepaliveInterval: 10 * time.Millisecond, KeepaliveTimeout: time.Second}, kaKick: make(chan struct{}, 1)}
	for _, c := range []struct{ set, want time.Duration }{
		{125 * time.Millisecond, 125 * time.Millisecond},
		{5 * time.Second, 250 * time.Millisecond},
		{5 * time.Millisecond, 10 * time.Millisecond},
		{0, 10 * time.Millisecond},
	} {
		s.setKeepaliveInterval(c.set)
		if got := s.keepaliveInterval(); got != c.want {
			t.Errorf("setKeepaliveInterval(%v): interval %v, want %v", c.set, got, c.want)
		}
	}
}

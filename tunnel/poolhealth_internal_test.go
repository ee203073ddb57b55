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

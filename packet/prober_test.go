package packet

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
)

// proberRig is a prober whose one target, 127.0.0.2, has nothing behind
// its VXLAN port (every probe goes unanswered), and a socket that answers
// as the target's programs would: from the target's address and the probe
// port to the prober's socket. The test drives the rounds with made-up
// times, so no judgement depends on the host's speed.
type proberRig struct {
	p      *Prober
	target netip.Addr
	answer *net.UDPConn
}

func newProberRig(t *testing.T) *proberRig {
	t.Helper()
	port := func() uint16 {
		ap := netip.MustParseAddrPort(testenv.FreeAddr(t))
		return ap.Port()
	}
	cfg := ProberConfig{Port: port(), TunnelPort: port(), Interval: 10 * time.Millisecond, Misses: 3}
	p, err := NewProber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	target := netip.MustParseAddr("127.0.0.2")
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(target, cfg.Port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p.SetTargets([]netip.Addr{target})
	return &proberRig{p: p, target: target, answer: c}
}

// at runs a round ms milliseconds after the prober started.
func (r *proberRig) at(ms int) {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	r.p.round(r.p.start.Add(time.Duration(ms) * time.Millisecond))
}

// reply puts an answer to the probe sent at ms in the prober's socket.
func (r *proberRig) reply(t *testing.T, ms int, nonce uint64) {
	t.Helper()
	b, err := ProbePayload{Nonce: nonce, Sent: int64(ms) * int64(time.Millisecond)}.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), r.p.port))
	if _, err := r.answer.WriteToUDP(b, to); err != nil {
		t.Fatal(err)
	}
}

func (r *proberRig) state(t *testing.T) ProbeState {
	t.Helper()
	st, ok := r.p.State(r.target)
	if !ok {
		t.Fatal("the target is gone")
	}
	return st
}

// TestProberJudges: a target is judged only once it answered; Misses
// probes unanswered half an interval each take it out; an answer to a
// probe sent after that brings it back, one sent before does not; an
// answer with another prober's nonce counts for nothing.
func TestProberJudges(t *testing.T) {
	r := newProberRig(t)
	for ms := 10; ms <= 100; ms += 10 {
		r.at(ms)
	}
	if st := r.state(t); st.Answered || !st.Live {
		t.Fatalf("never answered: %+v, want no verdict (live, not answered)", st)
	}
	r.reply(t, 100, r.p.nonce+1)
	r.at(110)
	if st := r.state(t); st.Answered {
		t.Fatalf("an answer with another nonce counted: %+v", st)
	}
	r.reply(t, 110, r.p.nonce)
	r.at(120)
	if st := r.state(t); !st.Answered || !st.Live || st.Answers != 1 {
		t.Fatalf("after an answer: %+v, want answered and live", st)
	}
	// Probes of 120, 130 and 140 go unanswered.
	r.at(130)
	r.at(140)
	if st := r.state(t); !st.Live {
		t.Fatalf("two probes missed: %+v, want live", st)
	}
	r.at(150)
	st := r.state(t)
	if st.Live || st.Downs != 1 {
		t.Fatalf("three probes missed: %+v, want dead once", st)
	}
	r.reply(t, 140, r.p.nonce) // sent before it was found dead
	r.at(160)
	if st := r.state(t); st.Live {
		t.Fatalf("revived by an answer to a probe sent before the down: %+v", st)
	}
	r.reply(t, 160, r.p.nonce)
	r.at(170)
	if st := r.state(t); !st.Live || st.Downs != 1 {
		t.Fatalf("an answer to a probe sent after the down: %+v, want live", st)
	}
}

// TestProberLateRound: a round that runs late (this process stalled)
// neither kills nor revives: the answers it reads may be old, and its
// silence proves nothing. The next round on time judges.
func TestProberLateRound(t *testing.T) {
	r := newProberRig(t)
	r.at(10)
	r.reply(t, 10, r.p.nonce)
	r.at(20)
	if st := r.state(t); !st.Live || !st.Answered {
		t.Fatalf("after an answer: %+v", st)
	}
	r.at(30)
	r.at(40)
	if st := r.state(t); !st.Live {
		t.Fatalf("two probes missed: %+v, want live", st)
	}
	// Stalled from 40 to 300: the probes of 20, 30 and 40 are unanswered,
	// but the round is late.
	r.at(300)
	if st := r.state(t); !st.Live {
		t.Fatalf("a late round took the target out: %+v", st)
	}
	if n := r.p.LateRounds(); n != 1 {
		t.Errorf("%d late rounds counted, want 1", n)
	}
	r.at(310)
	if st := r.state(t); st.Live {
		t.Fatalf("still unanswered in the round on time after the stall: %+v, want dead", st)
	}
	// The probe of 310 left after the verdict: its answer revives, but not
	// in a late round.
	r.reply(t, 310, r.p.nonce)
	r.at(900)
	if st := r.state(t); st.Live {
		t.Fatalf("a late round revived the target: %+v", st)
	}
	r.at(910)
	if st := r.state(t); !st.Live {
		t.Fatalf("the round after, on time, with an answer to a probe sent after the down: %+v, want live", st)
	}
}

func TestProberTargets(t *testing.T) {
	r := newProberRig(t)
	other := netip.MustParseAddr("127.0.0.3")
	r.p.SetTargets([]netip.Addr{r.target, other, netip.MustParseAddr("::1")})
	if _, ok := r.p.State(netip.MustParseAddr("::1")); ok {
		t.Errorf("an IPv6 target was taken")
	}
	r.reply(t, 0, r.p.nonce)
	r.at(10)
	r.p.SetTargets([]netip.Addr{r.target})
	if _, ok := r.p.State(other); ok {
		t.Errorf("a removed target is still probed")
	}
	if st := r.state(t); !st.Answered {
		t.Errorf("a kept target lost its state: %+v", st)
	}
	if r.p.port == r.p.cfg.Port {
		t.Errorf("the prober's socket has the probe port %d", r.p.port)
	}
}

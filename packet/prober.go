package packet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults of ProberConfig's zero fields: 3 probes of 10 ms unanswered take
// a peer gateway out 30–40 ms after its path died (docs/packet.md,
// "Health").
const (
	DefaultProbeInterval = 10 * time.Millisecond
	DefaultProbeMisses   = 3
	// maxPending bounds the unanswered probes a target remembers.
	maxPending = 64
)

// ProberConfig configures a Prober. The zero value of each field picks the
// default named beside it.
type ProberConfig struct {
	// Port is the probe port the peers' programs answer on
	// (DefaultProbePort); TunnelPort and VNI are their VXLAN device's
	// (DefaultTunnelPort, DefaultVNI).
	Port       uint16
	TunnelPort uint16
	VNI        uint32
	// Interval is how often every target is probed (DefaultProbeInterval).
	Interval time.Duration
	// Misses is how many probes in a row must go unanswered for a target
	// that answered before to be dead (DefaultProbeMisses). A probe
	// counts as missed half an interval after it was sent.
	Misses int
	Log    *slog.Logger
}

func (c *ProberConfig) defaults() {
	if c.Port == 0 {
		c.Port = DefaultProbePort
	}
	if c.TunnelPort == 0 {
		c.TunnelPort = DefaultTunnelPort
	}
	if c.VNI == 0 {
		c.VNI = DefaultVNI
	}
	if c.Interval == 0 {
		c.Interval = DefaultProbeInterval
	}
	if c.Misses == 0 {
		c.Misses = DefaultProbeMisses
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate checks c after filling in defaults, naming the field at fault.
func (c *ProberConfig) Validate() error {
	d := *c
	d.defaults()
	switch {
	case d.Interval < time.Millisecond || d.Interval > 10*time.Second:
		return fmt.Errorf("probe interval %v: allowed 1ms..10s (0: %v)", d.Interval, DefaultProbeInterval)
	case d.Misses < 1 || d.Misses > 1000:
		return fmt.Errorf("probe misses %d: allowed 1..1000 (0: %d)", d.Misses, DefaultProbeMisses)
	case d.VNI >= 1<<24:
		return fmt.Errorf("vni %d: allowed 1..16777215", d.VNI)
	}
	return nil
}

// ProbeState is what a Prober knows of one target.
type ProbeState struct {
	// Answered reports whether the target's programs ever answered this
	// prober: a target that never did (its programs answer no probes, or
	// its path was down since the prober started) has no verdict here.
	Answered bool
	// Live is false from Misses unanswered probes until an answer to a
	// probe sent after that.
	Live bool
	// Answers counts answers; Downs live → dead transitions.
	Answers, Downs uint64
}

// Prober probes peer gateways' programs through the tunnel (probe.go) and
// judges each by their answers: a node whose programs forward answers,
// whether or not its gateway process runs; one whose uplink, node or
// programs are gone does not. It runs in one goroutine (Run) that, every
// interval, reads the answers waiting in its socket, judges, and sends the
// next probes: an answer that arrived before a judgement always counts in
// it.
type Prober struct {
	cfg     ProberConfig
	fd      int
	port    uint16 // the socket's, the probes' source port
	nonce   uint64
	start   time.Time
	changed chan struct{}
	// wake tells an idle Run (no targets) that targets came, or Close.
	wake chan struct{}

	mu        sync.Mutex // guards below
	targets   map[netip.Addr]*probeTarget
	lastRound time.Time
	late      uint64 // rounds that ran late
	closed    bool
	buf       [512]byte // an answer's payload; longer ones are no answers
}

type probeTarget struct {
	src      netip.Addr // this node's address toward it, as routing picks
	resolved time.Time
	heard    int64   // send time of the latest answered probe, -1: none
	pending  []int64 // send times of the probes sent after heard
	state    ProbeState
	downAt   int64 // when it was found dead: an answer to a probe sent since revives it
}

// NewProber opens the prober's UDP socket (its port never the probe port,
// which would make its probes look like answers).
func NewProber(cfg ProberConfig) (*Prober, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	p := &Prober{cfg: cfg, nonce: rand.Uint64(), start: time.Now(), changed: make(chan struct{}, 1),
		wake: make(chan struct{}, 1), targets: map[netip.Addr]*probeTarget{}, fd: -1}
	for range 4 {
		fd, err := udpSocket(true)
		if err != nil {
			return nil, fmt.Errorf("probe socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{}); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("probe socket: bind: %w", err)
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("probe socket: %w", err)
		}
		if port := uint16(sa.(*unix.SockaddrInet4).Port); port != cfg.Port {
			p.fd, p.port = fd, port
			return p, nil
		}
		unix.Close(fd)
	}
	return nil, fmt.Errorf("probe socket: the kernel kept giving the probe port %d", cfg.Port)
}

// Close closes the socket; Run returns at its next round.
func (p *Prober) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		unix.Close(p.fd)
	}
	p.poke()
}

// poke wakes an idle Run.
func (p *Prober) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Changed receives a value after a target's state changed (coalesced).
func (p *Prober) Changed() <-chan struct{} { return p.changed }

// SetTargets makes the prober probe exactly addrs (IPv4 underlay
// addresses); targets it had keep their state.
func (p *Prober) SetTargets(addrs []netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keep := map[netip.Addr]bool{}
	for _, a := range addrs {
		a = a.Unmap()
		if !a.Is4() {
			continue
		}
		keep[a] = true
		if _, ok := p.targets[a]; !ok {
			p.targets[a] = &probeTarget{heard: -1, state: ProbeState{Live: true}}
		}
	}
	for a := range p.targets {
		if !keep[a] {
			delete(p.targets, a)
		}
	}
	if len(p.targets) > 0 {
		p.poke()
	}
}

// State reports what the prober knows of addr, false if it is no target.
func (p *Prober) State(addr netip.Addr) (ProbeState, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.targets[addr.Unmap()]
	if !ok {
		return ProbeState{}, false
	}
	return t.state, true
}

// LateRounds counts the rounds that ran late (more than two intervals
// after the one before: this process was not running), which judged
// nothing.
func (p *Prober) LateRounds() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.late
}

// Run probes until ctx is done or the prober is closed. Without targets it
// waits for some rather than waking every interval: a gateway that imports
// from no peer (an exporting one) probes nobody, and 100 idle rounds a
// second are a share of the CPU of a gateway whose data plane is the
// kernel's (docs/packet.md, "UDP at 900 Mbit/s").
func (p *Prober) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		p.mu.Lock()
		idle := len(p.targets) == 0 && !p.closed
		if idle {
			// Waiting for targets is no stall: the first round after it
			// is not late.
			p.lastRound = time.Time{}
		}
		p.mu.Unlock()
		if idle {
			t.Stop()
			select {
			case <-ctx.Done():
				return nil
			case <-p.wake:
			}
			t.Reset(p.cfg.Interval)
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p.mu.Lock()
		closed := p.closed
		if !closed {
			p.round(time.Now())
		}
		p.mu.Unlock()
		if closed {
			return nil
		}
	}
}

// round reads the answers, judges and sends one probe to every target
// (mu held).
func (p *Prober) round(now time.Time) {
	// A round that runs late means this process was not running: the
	// answers of the probes it sent before may wait unread, and it sent no
	// new ones meanwhile, so silence proves nothing now, and what it reads
	// may be old. A late round neither kills nor revives: it reads and
	// sends, and the next round on time judges (a stalled check that
	// revived a gateway whose link was down sent new flows into it,
	// tunnel/poolhealth.go).
	late := !p.lastRound.IsZero() && now.Sub(p.lastRound) > 2*p.cfg.Interval
	p.lastRound = now
	if late {
		p.late++
	}
	ns := now.Sub(p.start).Nanoseconds()
	changed := p.drain(ns)
	if !late {
		for a, t := range p.targets {
			if !t.state.Answered {
				continue
			}
			if !t.state.Live {
				// Back with an answer to a probe sent after it was found
				// dead (in that round or later).
				if t.heard >= t.downAt {
					t.state.Live = true
					changed = true
					p.cfg.Log.Info("packet probe: peer gateway health", "addr", a, "live", true, "why", "answering")
				}
				continue
			}
			missed := 0
			for _, s := range t.pending {
				if ns-s > p.cfg.Interval.Nanoseconds()/2 {
					missed++
				}
			}
			if missed >= p.cfg.Misses {
				t.state.Live = false
				t.state.Downs++
				t.downAt = ns
				changed = true
				p.cfg.Log.Info("packet probe: peer gateway health", "addr", a, "live", false,
					"why", fmt.Sprintf("%d probes unanswered, the last answered sent %v ago", missed, time.Duration(ns-t.heard).Round(time.Millisecond)))
			}
		}
	}
	for a, t := range p.targets {
		p.send(a, t, now, ns)
	}
	if changed {
		select {
		case p.changed <- struct{}{}:
		default:
		}
	}
}

// drain reads every answer waiting in the socket and reports whether a
// target's state changed.
func (p *Prober) drain(ns int64) bool {
	changed := false
	for {
		n, from, err := unix.Recvfrom(p.fd, p.buf[:], unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.EHOSTUNREACH), errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EINTR):
			// ICMP errors of earlier sends (a peer node without a VXLAN
			// device refuses): that probe is as good as lost.
			continue
		case err != nil:
			return changed // EAGAIN: nothing more waiting
		}
		sa, ok := from.(*unix.SockaddrInet4)
		if !ok || uint16(sa.Port) != p.cfg.Port {
			continue
		}
		t, ok := p.targets[netip.AddrFrom4(sa.Addr)]
		if !ok {
			continue
		}
		pl, err := ParseProbePayload(p.buf[:n])
		if err != nil || pl.Nonce != p.nonce || pl.Sent > ns {
			continue
		}
		t.state.Answers++
		if pl.Sent > t.heard {
			t.heard = pl.Sent
			kept := t.pending[:0]
			for _, s := range t.pending {
				if s > pl.Sent {
					kept = append(kept, s)
				}
			}
			t.pending = kept
		}
		if !t.state.Answered {
			// Its first answer: the probes judge it from now on (it was
			// live, judged by its sessions).
			t.state.Answered, t.state.Live = true, true
			changed = true
			p.cfg.Log.Info("packet probe: peer gateway health", "addr", netip.AddrFrom4(sa.Addr), "live", true, "why", "first answer")
		}
	}
}

// send sends one probe to a. A probe that cannot leave (no route) counts
// as sent and unanswered.
func (p *Prober) send(a netip.Addr, t *probeTarget, now time.Time, ns int64) {
	t.pending = append(t.pending, ns)
	if len(t.pending) > maxPending {
		t.pending = t.pending[len(t.pending)-maxPending:]
	}
	// The source address is the one routing picks toward a, as for the
	// node's tunnel packets; looked up again while a is silent, since a
	// changed route may be why.
	if !t.src.IsValid() || len(t.pending) > 1 || now.Sub(t.resolved) > time.Second {
		t.src, t.resolved = sourceToward(a, p.cfg.TunnelPort), now
	}
	if !t.src.IsValid() {
		return
	}
	frame, err := ProbeFrame(p.cfg.VNI, t.src, p.port, a, p.cfg.Port, ProbePayload{Nonce: p.nonce, Sent: ns})
	if err != nil {
		return
	}
	if err := unix.Sendto(p.fd, frame, 0, &unix.SockaddrInet4{Port: int(p.cfg.TunnelPort), Addr: a.As4()}); err != nil {
		t.src = netip.Addr{}
	}
}

// sourceToward is the local address routing picks toward a (a connected
// UDP socket's, which sends nothing), invalid when there is no route.
func sourceToward(a netip.Addr, port uint16) netip.Addr {
	fd, err := udpSocket(false)
	if err != nil {
		return netip.Addr{}
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(port), Addr: a.As4()}); err != nil {
		return netip.Addr{}
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.Addr{}
	}
	return netip.AddrFrom4(sa.(*unix.SockaddrInet4).Addr)
}

package tunnel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strait-net/strait/ring"
)

// PoolConfig configures a Pool of sessions to one peer cluster.
type PoolConfig struct {
	// Transport dials the sessions. Required.
	Transport Transport
	// Peer names the peer cluster in errors and logs.
	Peer string
	// Addrs are the peer's gateway addresses (host:port). Required.
	Addrs []string
	// SessionsPerAddr is how many sessions are kept to each gateway, at
	// most 16. Default 8. Each is a TCP connection, and under random loss
	// one cubic connection carries at most about 1.22/(RTT·√p) segments a
	// second (Mathis): about 4 000 at seed 001's cloud10 (10 ms, 0.08 %),
	// while a small request or response is a segment of its own, so seed
	// 002's 10 000 requests/s of 1 KB need three such connections each
	// way with no headroom at all. Over the two sessions of the earlier
	// default the sessions sat at their congestion windows with requests
	// queued unsent behind them, and every loss held half of all streams
	// back (README, "Many small requests over a lossy WAN"); over eight
	// they rarely fill their windows, a loss holds an eighth back, and
	// the sessions keep the algorithm they started on (Config.Congestion),
	// which sends each response at once. Idle
	// sessions cost little: the pool probes one session per gateway
	// (Pool.probe), and streams go to the least loaded session
	// (placement), so light work stays on the first ones.
	SessionsPerAddr int
	// DialTimeout bounds one dial including the handshake. Default 5s.
	DialTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential delay between
	// failed dials. Defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// ProbeInterval is how often the pool checks that each gateway still
	// answers: a gateway is live while one of its sessions received a frame
	// (pongs, or data) within ProbeInterval × ProbeMisses. Every interval
	// the pool pings one session of each gateway that heard nothing else
	// (sessions of this package's TLS transport; other transports must
	// keep their own keepalive interval at most ProbeInterval). Zero turns
	// the silence check off: a gateway is then live while it has a session
	// (for transports that do not count frames, such as QUIC).
	ProbeInterval time.Duration
	// ProbeMisses is how many probe intervals of silence make a gateway
	// dead. Default 3.
	ProbeMisses int
	// RingSeed seeds the gateway table; every gateway of a cluster uses the
	// same, so that they agree on placement. Zero is a fine seed.
	RingSeed uint64
	// Logger receives dial failures and session ends. Default slog.Default().
	Logger *slog.Logger
	// OnHeard, if set, is called from the pool's health loop after a check
	// changed some gateway's GatewayHealth.Heard, so that a watcher of
	// reachability need not poll Gateways. It must not block.
	OnHeard func()
}

// Sessions per gateway: PoolConfig.SessionsPerAddr's default and its
// largest value (gateway configuration's `sessions` takes the same).
const (
	DefaultSessionsPerAddr = 8
	MaxSessionsPerAddr     = 16
)

// Validate reports the first invalid field.
func (c *PoolConfig) Validate() error {
	switch {
	case c.Transport == nil:
		return errors.New("pool config: Transport is required")
	case len(c.Addrs) == 0:
		return errors.New("pool config: Addrs needs at least one gateway address")
	case c.SessionsPerAddr < 0 || c.SessionsPerAddr > MaxSessionsPerAddr:
		return fmt.Errorf("pool config: SessionsPerAddr must be 0 (default %d) or 1..%d, not %d", DefaultSessionsPerAddr, MaxSessionsPerAddr, c.SessionsPerAddr)
	case c.DialTimeout < 0, c.MinBackoff < 0, c.MaxBackoff < 0:
		return errors.New("pool config: DialTimeout, MinBackoff and MaxBackoff must be >= 0")
	case c.ProbeInterval < 0:
		return fmt.Errorf("pool config: ProbeInterval must be >= 0 (0: off), not %v", c.ProbeInterval)
	case c.ProbeMisses < 0 || c.ProbeMisses > 1000:
		return fmt.Errorf("pool config: ProbeMisses must be 0 (default 3) or 1..1000, not %d", c.ProbeMisses)
	}
	seen := map[string]bool{}
	for _, a := range c.Addrs {
		if a == "" || seen[a] {
			return fmt.Errorf("pool config: Addrs has an empty or duplicate address %q", a)
		}
		seen[a] = true
	}
	return nil
}

// Pool keeps SessionsPerAddr warm sessions to every gateway of one peer and
// opens streams on live ones. A session that ends takes its streams with it
// (they fail with its error); the pool redials it with backoff while new
// streams go to the other live sessions. With none live, OpenStream fails at
// once with ErrNoSession instead of waiting.
//
// The gateway for a flow comes from a ring.Table over Addrs (Maglev, seeded
// by RingSeed), so every gateway of a cluster sends a flow key to the same
// remote gateway. Health only ever takes the table's WithDown view: a dead
// gateway's flows move to the others and nothing else moves; when it
// answers again exactly its flows come back. A gateway is dead when none of
// its sessions is up (a killed process's socket closes, so its sessions end
// one one-way delay later), when all its sessions were silent for
// ProbeMisses probe intervals (a machine or link that died without a word),
// or when opening a stream on it just failed (until a frame arrives again).
// A silent gateway is only taken out of the table; its sessions and
// established streams stay until the transport's keepalive timeout, so a
// short stall under load moves new flows but breaks nothing.
type Pool struct {
	cfg   PoolConfig
	log   *slog.Logger
	slots []*slot
	gws   []*remote // per member of base, in its order
	base  *ring.Table
	view  atomic.Pointer[ring.Table]
	kick  chan struct{} // a session came up or ended: recheck health now
	// interval is the probe interval in force: cfg.ProbeInterval, or what
	// SetProbeInterval set; retick tells the health loop it changed.
	interval atomic.Int64
	retick   chan struct{}

	healthMu  sync.Mutex // serializes checkHealth and guards the slots' bookkeeping
	lastCheck time.Time  // of the last checkHealth, under healthMu
	// shrunk is the silence window in force before SetProbeInterval
	// shortened it, kept until shrunkUntil (set by the first check after
	// the change), both under healthMu: see SetProbeInterval.
	shrunk      time.Duration
	shrunkUntil time.Time

	firstRound chan struct{} // closed when every slot tried once, or one is live
	roundOnce  sync.Once
	firstLive  chan struct{} // closed when the table first has a live gateway
	liveOnce   sync.Once
	pending    sync.WaitGroup

	mu      sync.Mutex
	running bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
	closing chan struct{} // closed by the first Close, whether Run ran or not
}

type slot struct {
	addr    string
	gw      *remote
	mu      sync.Mutex
	sess    Session
	lastErr error
	// Health bookkeeping, touched only by the health loop.
	seen     Session // the session lastRecv is about
	frames   uint64  // its FramesReceived at lastRecv
	lastRecv time.Time
	// Probe bookkeeping (Pool.probe), touched only by the health loop.
	probed  Session // the session unasked is about
	unasked uint64  // its frames other than pongs at the last probe round
}

// remote is one gateway of the peer and what the pool knows of its health.
type remote struct {
	addr string
	up   atomic.Bool
	// heard: a frame arrived from it within the silence window at the
	// last check (up may keep a silent one: checkHealthLocked).
	heard   atomic.Bool
	suspect int // trusted, suspected or baselined (poolhealth.go), under the pool's healthMu
	streams atomic.Uint64
	downs   atomic.Uint64 // live → dead transitions
	since   atomic.Int64  // unix nanoseconds of the last transition
	// nextProbe picks the session the next probe goes to, round robin,
	// under the pool's healthMu.
	nextProbe int
	// lastHeard is the probe round that last found something unasked
	// from it, lastProbe the round that last pinged it (Pool.probe),
	// under the pool's healthMu.
	lastHeard, lastProbe time.Time
	// inbound are sessions this gateway dialed to us (Pool.Attach), under
	// the pool's healthMu.
	inbound []*inbound
}

// inbound is an accepted session of a peer gateway and what the health
// loop last saw of it.
type inbound struct {
	s        Session
	frames   uint64    // FramesReceived at lastRecv
	lastRecv time.Time // zero until a frame arrived after Attach
	unasked  uint64    // frames other than pongs at the last probe round
}

func (sl *slot) get() (Session, error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.sess != nil && sl.sess.Err() != nil {
		return nil, sl.sess.Err()
	}
	return sl.sess, sl.lastErr
}

// NewPool returns a pool; Run starts it.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SessionsPerAddr == 0 {
		cfg.SessionsPerAddr = DefaultSessionsPerAddr
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 5 * time.Second
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	if cfg.ProbeMisses == 0 {
		cfg.ProbeMisses = 3
	}
	base, err := ring.New(cfg.Addrs, ring.Options{Seed: cfg.RingSeed})
	if err != nil {
		return nil, fmt.Errorf("pool config: %w", err)
	}
	p := &Pool{cfg: cfg, log: cfg.Logger, firstRound: make(chan struct{}), firstLive: make(chan struct{}), done: make(chan struct{}), closing: make(chan struct{}),
		base: base, kick: make(chan struct{}, 1), retick: make(chan struct{}, 1)}
	p.interval.Store(int64(cfg.ProbeInterval))
	if p.log == nil {
		p.log = slog.Default()
	}
	now := time.Now().UnixNano()
	for _, a := range base.Members() {
		r := &remote{addr: a}
		r.since.Store(now)
		p.gws = append(p.gws, r)
	}
	// Every gateway starts dead, so the first view routes nowhere until a
	// session is up; OpenStream waits for the first dial round anyway.
	p.setView()
	for _, a := range cfg.Addrs {
		gw := p.gws[slices.IndexFunc(p.gws, func(r *remote) bool { return r.addr == a })]
		for range cfg.SessionsPerAddr {
			p.slots = append(p.slots, &slot{addr: a, gw: gw})
		}
	}
	p.pending.Add(len(p.slots))
	return p, nil
}

// Run dials and redials the sessions until ctx is done or Close is called,
// then closes them and returns after its goroutines exited.
func (p *Pool) Run(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	if p.running {
		p.mu.Unlock()
		return errors.New("pool: Run called twice")
	}
	p.running = true
	ctx, p.cancel = context.WithCancel(ctx)
	p.mu.Unlock()
	defer close(p.done)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		p.pending.Wait()
		p.roundOnce.Do(func() { close(p.firstRound) })
	}()
	go func() {
		defer wg.Done()
		p.watchHealth(ctx)
	}()
	for _, sl := range p.slots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.keep(ctx, sl)
		}()
	}
	wg.Wait()
	return nil
}

// Close stops Run and waits for it; a Run after Close returns at once.
// Idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	if !p.closed {
		close(p.closing)
	}
	p.closed = true
	running, cancel := p.running, p.cancel
	p.mu.Unlock()
	p.roundOnce.Do(func() { close(p.firstRound) }) // OpenStream fails fast
	if running {
		cancel()
		<-p.done
	}
	return nil
}

func (p *Pool) keep(ctx context.Context, sl *slot) {
	backoff := p.cfg.MinBackoff
	first := true
	markTried := func() {
		if first {
			first = false
			p.pending.Done()
		}
	}
	defer markTried()
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
		s, err := p.cfg.Transport.Dial(dctx, sl.addr)
		cancel()
		if err != nil {
			sl.mu.Lock()
			sl.lastErr = err
			sl.mu.Unlock()
			markTried()
			if ctx.Err() == nil {
				p.log.Debug("dial peer gateway", "peer", p.cfg.Peer, "addr", sl.addr, "err", err)
			}
			if !sleep(ctx, jitter(backoff)) {
				return
			}
			backoff = min(2*backoff, p.cfg.MaxBackoff)
			continue
		}
		sl.mu.Lock()
		sl.sess, sl.lastErr = s, nil
		sl.mu.Unlock()
		p.checkHealth(time.Now()) // before the first round ends, so OpenStream sees it live
		p.roundOnce.Do(func() { close(p.firstRound) })
		markTried()
		began := time.Now()
		select {
		case <-s.Done():
		case <-ctx.Done():
		}
		_ = s.Close()
		sl.mu.Lock()
		sl.sess, sl.lastErr = nil, s.Err()
		sl.mu.Unlock()
		p.kickHealth()
		if ctx.Err() != nil {
			return
		}
		p.log.Info("session to peer gateway ended", "peer", p.cfg.Peer, "addr", sl.addr, "err", s.Err())
		// Redial at once after a long-lived session; back off when sessions
		// keep dying young, so a sick peer is not hammered.
		if time.Since(began) > 10*time.Second {
			backoff = p.cfg.MinBackoff
			continue
		}
		if !sleep(ctx, jitter(backoff)) {
			return
		}
		backoff = min(2*backoff, p.cfg.MaxBackoff)
	}
}

func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Live returns the gateway addresses with at least one live session, in
// configuration order (for status; flows go by the table, see Gateways).
func (p *Pool) Live() []string {
	var live []string
	for _, sl := range p.slots {
		if s, _ := sl.get(); s != nil && !slices.Contains(live, sl.addr) {
			live = append(live, sl.addr)
		}
	}
	return live
}

// WaitLive waits until some gateway of the peer is live (the table routes
// flows somewhere) and reports whether one is; false when ctx ended first
// or the pool was closed. A gateway that is just starting uses it to
// announce itself ready only once it can carry flows.
func (p *Pool) WaitLive(ctx context.Context) bool {
	select {
	case <-p.firstLive:
		return true
	case <-ctx.Done():
		return false
	case <-p.closing:
		return false
	case <-p.done:
		return false
	}
}

// OpenStream opens a stream for the flow key on the gateway the table
// gives it. When that fails (the gateway died an instant ago), the gateway
// is marked dead at once and the flow takes its place in the new view, so
// only flows of dead gateways ever move. It waits only for the pool's first
// dial round; with no live gateway it fails with ErrNoSession.
func (p *Pool) OpenStream(ctx context.Context, key uint64, header []byte) (Stream, error) {
	select {
	case <-p.firstRound:
	case <-ctx.Done():
		return nil, fmt.Errorf("open stream to %s: %w", p.cfg.Peer, ctx.Err())
	}
	var lastErr error
	for range len(p.gws) {
		i := p.view.Load().LookupIndex(key)
		if i < 0 {
			break
		}
		st, err := p.openOn(ctx, p.gws[i].addr, key, header)
		if err == nil {
			p.gws[i].streams.Add(1)
			return st, nil
		}
		if errors.Is(err, ErrHeaderTooLarge) || ctx.Err() != nil {
			return nil, fmt.Errorf("open stream to %s: %w", p.cfg.Peer, err)
		}
		lastErr = err
		p.openFailed(i)
	}
	if lastErr != nil {
		return nil, fmt.Errorf("open stream to %s: %w (last error: %v)", p.cfg.Peer, ErrNoSession, lastErr)
	}
	return nil, fmt.Errorf("open stream to %s: %w", p.cfg.Peer, ErrNoSession)
}

// openOn opens a stream on one of addr's live sessions, in the order
// placement gives them.
func (p *Pool) openOn(ctx context.Context, addr string, key uint64, header []byte) (Stream, error) {
	var buf [MaxSessionsPerAddr]Session
	var loadBuf [MaxSessionsPerAddr]int
	live, loads := buf[:0], loadBuf[:0]
	counted := true
	var lastErr error
	for _, sl := range p.slots {
		if sl.addr != addr {
			continue
		}
		s, err := sl.get()
		if s == nil {
			if err != nil {
				lastErr = err
			}
			continue
		}
		live = append(live, s)
		if c, ok := s.(streamCounter); ok {
			loads = append(loads, c.openStreams())
		} else {
			counted = false
		}
	}
	if !counted {
		loads = nil
	}
	var tried uint32
	for range live {
		i := placement(len(live), loads, key, tried)
		tried |= 1 << i
		st, err := live[i].OpenStream(ctx, header)
		if err == nil {
			return st, nil
		}
		if errors.Is(err, ErrHeaderTooLarge) || ctx.Err() != nil {
			return nil, err
		}
		lastErr = err
	}
	if lastErr != nil {
		return nil, fmt.Errorf("gateway %s: %w (last error: %v)", addr, ErrNoSession, lastErr)
	}
	return nil, fmt.Errorf("gateway %s: %w", addr, ErrNoSession)
}

// streamCounter is a Session that knows how many streams it carries now
// (this package's; QUIC's sessions do not say).
type streamCounter interface{ openStreams() int }

// placement picks which of a gateway's n live sessions (in slot order) a
// new stream tries next, among those not yet tried (bits of tried); -1
// when all were.
//
// With loads (the streams each carries) it takes the least loaded, the
// first on a tie. Even spread is what the sessions are for: each is a TCP
// connection, whose congestion window under random loss carries at most
// about 1.22/(RTT·√p) segments a second (Mathis), and one small request or
// response is a segment; spread thinly, each connection also holds fewer
// streams behind a lost segment (PoolConfig.SessionsPerAddr). The tie
// rule keeps work that comes one stream at a time (a client reconnecting
// for every request) on the first session, whose congestion window stays
// open, where spreading it would leave each session idle long enough for
// the kernel to restart it from slow start.
//
// Without loads (sessions that do not count) the key picks the first,
// and the others follow in slot order.
func placement(n int, loads []int, key uint64, tried uint32) int {
	best := -1
	for j := range n {
		i := j
		if loads == nil {
			i = int((key + uint64(j)) % uint64(n))
		}
		if tried&(1<<i) != 0 {
			continue
		}
		if loads == nil {
			return i
		}
		if best < 0 || loads[i] < loads[best] {
			best = i
		}
	}
	return best
}

// Stats sums the counters of the live sessions.
func (p *Pool) Stats() Stats {
	var t Stats
	for _, sl := range p.slots {
		s, _ := sl.get()
		if s == nil {
			continue
		}
		x := s.Stats()
		t.StreamsOpened += x.StreamsOpened
		t.StreamsAccepted += x.StreamsAccepted
		t.StreamsRefused += x.StreamsRefused
		t.ResetsSent += x.ResetsSent
		t.ResetsReceived += x.ResetsReceived
		t.BytesSent += x.BytesSent
		t.BytesReceived += x.BytesReceived
		t.FramesSent += x.FramesSent
		t.FramesReceived += x.FramesReceived
		t.PingsSent += x.PingsSent
		t.PongsReceived += x.PongsReceived
		t.RTT = max(t.RTT, x.RTT)
		t.StreamWindow = max(t.StreamWindow, x.StreamWindow)
		if t.Congestion == "" {
			t.Congestion = x.Congestion
		}
	}
	return t
}

package tunnel

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// PoolConfig configures a Pool of sessions to one peer cluster.
type PoolConfig struct {
	// Transport dials the sessions. Required.
	Transport Transport
	// Peer names the peer cluster in errors and logs.
	Peer string
	// Addrs are the peer's gateway addresses (host:port). Required.
	Addrs []string
	// SessionsPerAddr is how many sessions are kept to each gateway.
	// Default 2: a second TCP connection halves head-of-line blocking after
	// a loss and keeps a warm spare while the other redials.
	SessionsPerAddr int
	// DialTimeout bounds one dial including the handshake. Default 5s.
	DialTimeout time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential delay between
	// failed dials. Defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives dial failures and session ends. Default slog.Default().
	Logger *slog.Logger
}

// Validate reports the first invalid field.
func (c *PoolConfig) Validate() error {
	switch {
	case c.Transport == nil:
		return errors.New("pool config: Transport is required")
	case len(c.Addrs) == 0:
		return errors.New("pool config: Addrs needs at least one gateway address")
	case c.SessionsPerAddr < 0 || c.SessionsPerAddr > 16:
		return fmt.Errorf("pool config: SessionsPerAddr must be 0 (default 2) or 1..16, not %d", c.SessionsPerAddr)
	case c.DialTimeout < 0, c.MinBackoff < 0, c.MaxBackoff < 0:
		return errors.New("pool config: DialTimeout, MinBackoff and MaxBackoff must be >= 0")
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
type Pool struct {
	cfg   PoolConfig
	log   *slog.Logger
	slots []*slot

	firstRound chan struct{} // closed when every slot tried once, or one is live
	roundOnce  sync.Once
	pending    sync.WaitGroup

	mu      sync.Mutex
	running bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

type slot struct {
	addr    string
	mu      sync.Mutex
	sess    Session
	lastErr error
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
		cfg.SessionsPerAddr = 2
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
	p := &Pool{cfg: cfg, log: cfg.Logger, firstRound: make(chan struct{}), done: make(chan struct{})}
	if p.log == nil {
		p.log = slog.Default()
	}
	for _, a := range cfg.Addrs {
		for range cfg.SessionsPerAddr {
			p.slots = append(p.slots, &slot{addr: a})
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
	go func() {
		p.pending.Wait()
		p.roundOnce.Do(func() { close(p.firstRound) })
	}()
	var wg sync.WaitGroup
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
// configuration order. It is the hook for flow-hashing gateway choice.
func (p *Pool) Live() []string {
	var live []string
	for _, sl := range p.slots {
		if s, _ := sl.get(); s != nil && !slices.Contains(live, sl.addr) {
			live = append(live, sl.addr)
		}
	}
	return live
}

// OpenStream opens a stream on a live session. key identifies the flow: the
// same key goes to the same gateway while it lives (rendezvous hashing), and
// only the flows of a dead gateway move. It waits only for the pool's first
// dial round; with no live session it fails with ErrNoSession.
func (p *Pool) OpenStream(ctx context.Context, key uint64, header []byte) (Stream, error) {
	addrs := slices.Clone(p.cfg.Addrs)
	score := func(a string) uint64 {
		h := fnv.New64a()
		var k [8]byte
		for i := range k {
			k[i] = byte(key >> (8 * i))
		}
		h.Write(k[:])
		h.Write([]byte(a))
		return h.Sum64()
	}
	slices.SortFunc(addrs, func(a, b string) int {
		sa, sb := score(a), score(b)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	return p.open(ctx, addrs, key, header)
}

// OpenStreamTo opens a stream to the gateway at addr (one of Addrs), for
// callers that choose the gateway themselves.
func (p *Pool) OpenStreamTo(ctx context.Context, addr string, key uint64, header []byte) (Stream, error) {
	if !slices.Contains(p.cfg.Addrs, addr) {
		return nil, fmt.Errorf("open stream to %s: %s is not one of its gateways", p.cfg.Peer, addr)
	}
	return p.open(ctx, []string{addr}, key, header)
}

func (p *Pool) open(ctx context.Context, addrs []string, key uint64, header []byte) (Stream, error) {
	select {
	case <-p.firstRound:
	case <-ctx.Done():
		return nil, fmt.Errorf("open stream to %s: %w", p.cfg.Peer, ctx.Err())
	}
	var lastErr error
	n := uint64(p.cfg.SessionsPerAddr)
	for _, a := range addrs {
		var slots []*slot
		for _, sl := range p.slots {
			if sl.addr == a {
				slots = append(slots, sl)
			}
		}
		for i := range n {
			sl := slots[(key+i)%n]
			s, err := sl.get()
			if s == nil {
				if err != nil {
					lastErr = err
				}
				continue
			}
			st, err := s.OpenStream(ctx, header)
			if err == nil {
				return st, nil
			}
			if errors.Is(err, ErrHeaderTooLarge) || ctx.Err() != nil {
				return nil, fmt.Errorf("open stream to %s: %w", p.cfg.Peer, err)
			}
			lastErr = err
		}
	}
	if lastErr != nil {
		return nil, fmt.Errorf("open stream to %s: %w (last error: %v)", p.cfg.Peer, ErrNoSession, lastErr)
	}
	return nil, fmt.Errorf("open stream to %s: %w", p.cfg.Peer, ErrNoSession)
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

package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ProberConfig configures a Prober.
type ProberConfig struct {
	// Targets are the UDP host:port addresses of the responders. Required.
	Targets []string
	// Interval between probes to each target. Default 5ms.
	Interval time.Duration
	// Misses is how many intervals without a reply make a target dead.
	// Default 3.
	Misses int
	// OnChange is called, from one goroutine at a time, whenever a target's
	// state changes, and once per target when its first state is known.
	// Required.
	OnChange func(target string, up bool)
}

// Validate reports the first bad field.
func (c *ProberConfig) Validate() error {
	if len(c.Targets) == 0 {
		return errors.New("health prober: targets: need at least one")
	}
	for i, t := range c.Targets {
		if _, _, err := net.SplitHostPort(t); err != nil {
			return fmt.Errorf("health prober: targets[%d] %q: want host:port", i, t)
		}
	}
	switch {
	case c.Interval < 0:
		return fmt.Errorf("health prober: interval %v: must be >= 0 (0: 5ms)", c.Interval)
	case c.Misses < 0:
		return fmt.Errorf("health prober: misses %d: must be >= 0 (0: 3)", c.Misses)
	case c.OnChange == nil:
		return errors.New("health prober: OnChange is required")
	}
	return nil
}

// Prober probes every target and reports state changes.
type Prober struct {
	cfg  ProberConfig
	kick chan struct{} // a target refused: decide now, not at the next tick
	// Stats, cumulative.
	Sent, Received atomic.Uint64
}

// NewProber checks cfg and applies its defaults.
func NewProber(cfg ProberConfig) (*Prober, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Millisecond
	}
	if cfg.Misses == 0 {
		cfg.Misses = 3
	}
	return &Prober{cfg: cfg, kick: make(chan struct{}, 1)}, nil
}

type target struct {
	addr     string
	conn     *net.UDPConn
	lastRecv atomic.Int64 // unix nanoseconds of the last reply
	refused  atomic.Bool  // ICMP port unreachable since the last reply
}

// Run probes until ctx is done and returns after its goroutines exited.
func (p *Prober) Run(ctx context.Context) error {
	var ts []*target
	var wg sync.WaitGroup
	defer func() {
		for _, t := range ts {
			t.conn.Close() // ends the readers
		}
		wg.Wait()
	}()
	for _, a := range p.cfg.Targets {
		c, err := net.Dial("udp", a)
		if err != nil {
			return fmt.Errorf("health prober: %s: %w", a, err)
		}
		ts = append(ts, &target{addr: a, conn: c.(*net.UDPConn)})
	}
	for _, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.read(t)
		}()
	}

	state := make([]int, len(ts)) // 0 unknown, 1 up, 2 down
	window := time.Duration(p.cfg.Misses) * p.cfg.Interval
	started := time.Now()
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	buf := make([]byte, ProbeLen)
	prev := started
	for seq := uint64(1); ; seq++ {
		now := time.Now()
		// A round that starts late means this process was not running: the
		// replies may sit unread in the sockets, so silence proves nothing
		// this round. Refusals (ICMP port unreachable) still count.
		late := now.Sub(prev) > 2*p.cfg.Interval
		prev = now
		for i, t := range ts {
			last := t.lastRecv.Load()
			silent := last == 0 || now.Sub(time.Unix(0, last)) >= window
			if late && state[i] == 1 {
				silent = false
			}
			up := !silent && !t.refused.Load()
			known := up || t.refused.Load() || now.Sub(started) >= window
			want := 2
			if up {
				want = 1
			}
			if known && state[i] != want {
				state[i] = want
				p.cfg.OnChange(t.addr, up)
			}
			Encode(buf, seq)
			if _, err := t.conn.Write(buf); err == nil {
				p.Sent.Add(1)
			} else if isRefused(err) {
				t.refused.Store(true)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-p.kick: // decide at once; the extra probes cost nothing
		}
	}
}

func (p *Prober) read(t *target) {
	buf := make([]byte, 64)
	for {
		n, err := t.conn.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			if isRefused(err) && !t.refused.Swap(true) {
				select {
				case p.kick <- struct{}{}:
				default:
				}
			}
			continue
		}
		if _, err := Decode(buf[:n]); err != nil {
			continue
		}
		p.Received.Add(1)
		t.refused.Store(false)
		t.lastRecv.Store(time.Now().UnixNano())
	}
}

func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

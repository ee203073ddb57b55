package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"
)

const (
	dialTimeout = 5 * time.Second
	// warmMaxAge retires idle warm connections before typical server idle
	// timeouts would close them under us.
	warmMaxAge = 20 * time.Second
)

// preconnector keeps a few idle connections open to one export target, the
// way Envoy's preconnect does: a new stream then needs no TCP handshake with
// the service, which on a slow cluster network saves a round trip per
// connection.
//
// A stream always gets the oldest connection not yet used, and no warm
// connection is dialed while a stream dials one of its own: the target sees
// connections in the order streams use them. A server that serves one
// connection at a time in the order it accepts them, and waits for the
// first bytes of the one it accepted (iperf3 does), otherwise waits on an
// idle warm connection while the client's connection, established after
// it, sits in its accept queue until the warm one is retired (warmMaxAge):
// a client hung 20 s, then reset when the server gave up (README,
// "Preconnected target connections").
type preconnector struct {
	addr string
	want int
	log  *slog.Logger
	// dial connects to addr; tests wrap it to hold a dial in flight.
	dial func(ctx context.Context, addr string) (*net.TCPConn, error)

	mu      sync.Mutex
	idle    []warmConn // oldest first
	closed  bool
	kick    chan struct{}
	dialing chan struct{} // non-nil while run dials; closed when that dial ended
	demand  int           // streams in get: waiting for that dial or dialing their own
}

type warmConn struct {
	c    *net.TCPConn
	born time.Time
}

// newPreconnector keeps want connections to addr on congestion control cc
// ("" the kernel's).
func newPreconnector(addr string, want int, cc string, log *slog.Logger) *preconnector {
	dial := func(ctx context.Context, addr string) (*net.TCPConn, error) { return dialTCP(ctx, addr, cc) }
	return &preconnector{addr: addr, want: want, log: log, kick: make(chan struct{}, 1), dial: dial}
}

// dialTCP connects to addr on congestion control cc ("" the kernel's, as
// where the kernel lacks cc), set before the handshake.
func dialTCP(ctx context.Context, addr, cc string) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: dialTimeout, Control: func(_, _ string, c syscall.RawConn) error {
		_ = setCongestion(c, cc)
		return nil
	}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// get returns a connection for a new stream and whether it was warm: the
// oldest live idle one; else the one run is dialing, once dialed; else a
// new one, dialed while run waits, so that no warm connection reaches the
// target ahead of it (see preconnector).
func (p *preconnector) get(ctx context.Context) (*net.TCPConn, bool, error) {
	defer p.refill()
	p.mu.Lock()
	p.demand++
	for {
		if c := p.takeLocked(); c != nil {
			p.demand--
			p.mu.Unlock()
			return c, true, nil
		}
		ch := p.dialing
		if ch == nil {
			break
		}
		p.mu.Unlock()
		// Bounded by run's dial timeout.
		select {
		case <-ch:
		case <-ctx.Done():
			p.mu.Lock()
			p.demand--
			p.mu.Unlock()
			return nil, false, ctx.Err()
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
	c, err := p.dial(ctx, p.addr)
	p.mu.Lock()
	p.demand--
	p.mu.Unlock()
	return c, false, err
}

// takeLocked pops the oldest live idle connection, closing dead and aged
// ones on the way; nil when none is left. p.mu is held.
func (p *preconnector) takeLocked() *net.TCPConn {
	for len(p.idle) > 0 {
		w := p.idle[0]
		p.idle = p.idle[1:]
		if time.Since(w.born) < warmMaxAge && alive(w.c) {
			return w.c
		}
		w.c.Close()
	}
	return nil
}

func (p *preconnector) refill() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run keeps want connections ready until ctx is done or close is called.
func (p *preconnector) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	tick := time.NewTicker(warmMaxAge / 4)
	defer tick.Stop()
	p.refill()
	for {
		select {
		case <-ctx.Done():
			p.close()
			return
		case <-p.kick:
		case <-tick.C:
			p.expire()
		}
		for {
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				return
			}
			// A stream dialing its own connection goes first; the last
			// one to finish kicks this loop again.
			if len(p.idle) >= p.want || p.demand > 0 {
				p.mu.Unlock()
				break
			}
			done := make(chan struct{})
			p.dialing = done
			p.mu.Unlock()
			c, err := p.dial(ctx, p.addr)
			p.mu.Lock()
			p.dialing = nil
			closed := p.closed
			if err == nil && !closed {
				p.idle = append(p.idle, warmConn{c, time.Now()})
			}
			p.mu.Unlock()
			close(done)
			if err == nil && closed {
				c.Close()
			}
			if ctx.Err() != nil {
				p.close()
				return
			}
			if closed {
				return
			}
			if err != nil {
				p.log.Debug("preconnect failed", "target", p.addr, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, 5*time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
		}
	}
}

func (p *preconnector) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.idle[:0]
	for _, w := range p.idle {
		if time.Since(w.born) < warmMaxAge && alive(w.c) {
			kept = append(kept, w)
		} else {
			w.c.Close()
		}
	}
	p.idle = kept
}

func (p *preconnector) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, w := range p.idle {
		w.c.Close()
	}
	p.idle = nil
	p.refill()
}

// alive reports whether the server has neither closed nor written to an
// idle connection: a peek that would block means nothing arrived.
func alive(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = errors.Is(err, syscall.EAGAIN)
		return true
	})
	return ok
}

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
type preconnector struct {
	addr string
	want int
	log  *slog.Logger

	mu     sync.Mutex
	idle   []warmConn
	closed bool
	kick   chan struct{}
}

type warmConn struct {
	c    *net.TCPConn
	born time.Time
}

func newPreconnector(addr string, want int, log *slog.Logger) *preconnector {
	return &preconnector{addr: addr, want: want, log: log, kick: make(chan struct{}, 1)}
}

// take returns a live warm connection, or nil if none is ready.
func (p *preconnector) take() *net.TCPConn {
	defer p.refill()
	p.mu.Lock()
	defer p.mu.Unlock()
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
			n, closed := len(p.idle), p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if n >= p.want {
				break
			}
			d := net.Dialer{Timeout: dialTimeout}
			c, err := d.DialContext(ctx, "tcp", p.addr)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				p.log.Debug("preconnect failed", "target", p.addr, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
				backoff = min(backoff*2, 5*time.Second)
				continue
			}
			backoff = 50 * time.Millisecond
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				c.Close()
				return
			}
			p.idle = append(p.idle, warmConn{c.(*net.TCPConn), time.Now()})
			p.mu.Unlock()
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

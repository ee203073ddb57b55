package tunnel_test

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// delayConn delays both directions of a connection by a fixed one-way
// delay without limiting bandwidth, so the only window in play is the
// multiplexer's (a WAN with an infinitely deep pipe). Writes never block.
type delayConn struct {
	net.Conn
	delay  time.Duration
	wq     chan timed
	rq     chan timed
	rest   []byte
	rerr   error
	closed chan struct{}
	once   sync.Once
}

type timed struct {
	at   time.Time
	data []byte
	err  error
}

func newDelayConn(c net.Conn, delay time.Duration) *delayConn {
	d := &delayConn{Conn: c, delay: delay, wq: make(chan timed, 1<<16), rq: make(chan timed, 1<<16), closed: make(chan struct{})}
	go func() {
		for {
			select {
			case b := <-d.wq:
				time.Sleep(time.Until(b.at))
				if _, err := d.Conn.Write(b.data); err != nil {
					return
				}
			case <-d.closed:
				return
			}
		}
	}()
	go func() {
		for {
			buf := make([]byte, 64<<10)
			n, err := d.Conn.Read(buf)
			select {
			case d.rq <- timed{time.Now().Add(delay), buf[:n], err}:
			case <-d.closed:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return d
}

func (d *delayConn) Write(p []byte) (int, error) {
	b := timed{at: time.Now().Add(d.delay), data: append([]byte(nil), p...)}
	select {
	case d.wq <- b:
		return len(p), nil
	case <-d.closed:
		return 0, net.ErrClosed
	}
}

func (d *delayConn) Read(p []byte) (int, error) {
	for len(d.rest) == 0 {
		if d.rerr != nil {
			return 0, d.rerr
		}
		select {
		case b := <-d.rq:
			time.Sleep(time.Until(b.at))
			d.rest, d.rerr = b.data, b.err
		case <-d.closed:
			return 0, net.ErrClosed
		}
	}
	n := copy(p, d.rest)
	d.rest = d.rest[n:]
	return n, nil
}

func (d *delayConn) Close() error {
	d.once.Do(func() { close(d.closed) })
	return d.Conn.Close()
}

// gateConn can hold back what the peer sent (reads wait until Open) or
// turn into a black hole (writes vanish, reads never return), as a peer
// that died without closing does.
type gateConn struct {
	net.Conn
	mu        sync.Mutex
	gate      chan struct{} // non-nil: reads wait for it to close
	parked    atomic.Int32  // reads waiting at the gate
	blackhole atomic.Bool
	closed    chan struct{}
	once      sync.Once
}

func newGateConn(c net.Conn) *gateConn { return &gateConn{Conn: c, closed: make(chan struct{})} }

func (g *gateConn) Hold() {
	g.mu.Lock()
	if g.gate == nil {
		g.gate = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gateConn) Open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *gateConn) wait() error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.parked.Add(1)
		defer g.parked.Add(-1)
		select {
		case <-gate:
		case <-g.closed:
			return net.ErrClosed
		}
	}
	if g.blackhole.Load() {
		<-g.closed
		return net.ErrClosed
	}
	return nil
}

func (g *gateConn) Read(p []byte) (int, error) {
	if err := g.wait(); err != nil {
		return 0, err
	}
	n, err := g.Conn.Read(p)
	// Data that arrived while the gate closed is held (or lost) too.
	if werr := g.wait(); werr != nil {
		return 0, werr
	}
	return n, err
}

func (g *gateConn) Write(p []byte) (int, error) {
	if g.blackhole.Load() {
		return len(p), nil
	}
	return g.Conn.Write(p)
}

func (g *gateConn) Close() error {
	g.once.Do(func() { close(g.closed) })
	return g.Conn.Close()
}

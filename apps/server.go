package apps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/strait-net/strait/internal/rawsock"
)

// Server is a listening workload server: HTTP/1.1 with keep-alive, read and
// written by this package (http1.go says why not net/http).
type Server struct {
	cfg   Config
	ln    net.Listener
	reply replier

	mu    sync.Mutex
	conns map[*conn]struct{}
	wg    sync.WaitGroup // connection goroutines
	// draining: stop keeping connections alive (Run's context ended or
	// Close was called).
	draining atomic.Bool
	// newGrace is how long a graceful shutdown lets a connection that
	// has sent nothing yet live (defaultNewGrace; tests change it).
	newGrace  time.Duration
	closeOnce sync.Once
	closeErr  error
}

// Listen validates cfg and binds its address, so the caller knows the
// address (Addr) before serving starts and clients can connect at once.
func Listen(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	// Go turns TCP_NODELAY on for every TCP connection, accepted ones
	// included; we rely on it: with Nagle on, a response written in two
	// segments waits for the client's delayed ACK (~40 ms on Linux).
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	// Reads and writes are raw system calls (internal/rawsock), for the
	// same reason as the hand-made HTTP: the server's CPU is taken from
	// the tool under test.
	return &Server{cfg: cfg, ln: rawsock.Listener{Listener: ln}, reply: newReplier(cfg), conns: map[*conn]struct{}{}, newGrace: defaultNewGrace}, nil
}

// Addr is the bound address, with the real port when Config.Listen asked
// for port 0.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Kind is the workload this server runs.
func (s *Server) Kind() Kind { return s.cfg.Kind }

// Run serves until ctx ends or Close is called. When ctx ends it shuts
// down gracefully: it stops accepting, closes idle connections, lets
// requests in flight finish for up to ShutdownTimeout, and closes the
// rest. It returns nil after a requested stop, and only after every
// connection is closed.
func (s *Server) Run(ctx context.Context) error {
	s.cfg.Logger.Debug("serving", "kind", s.cfg.Kind, "addr", s.Addr().String())
	acceptDone := make(chan error, 1)
	go func() { acceptDone <- s.accept() }()
	var err error
	select {
	case err = <-acceptDone:
		// Close was called, or accepting failed.
		_ = s.Close()
	case <-ctx.Done():
		s.shutdown()
		err = <-acceptDone
	}
	s.wg.Wait()
	s.cfg.Logger.Debug("stopped", "kind", s.cfg.Kind, "addr", s.Addr().String())
	if err != nil {
		return fmt.Errorf("serve %s: %w", s.Addr(), err)
	}
	return nil
}

// accept accepts connections until the listener is closed; it returns nil
// then, and the error when accepting fails for good.
func (s *Server) accept() error {
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if s.draining.Load() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors or the like: wait for
				// connections to close, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn("accept", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		tc, ok := nc.(*rawsock.TCPConn)
		if !ok {
			_ = nc.Close()
			continue
		}
		c := newConn(s, tc)
		s.mu.Lock()
		if s.draining.Load() {
			s.mu.Unlock()
			_ = nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// shutdown stops accepting, closes idle connections as they become idle,
// and after ShutdownTimeout closes the rest.
func (s *Server) shutdown() {
	s.draining.Store(true)
	_ = s.ln.Close()
	deadline := time.Now().Add(s.cfg.ShutdownTimeout)
	for s.closeIdle() > 0 {
		if time.Now().After(deadline) {
			// Busy past the deadline: cut them off. That is the point
			// of the deadline, not a failure of the server.
			s.closeAll()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closeIdle closes the connections that wait for a request and returns how
// many others remain.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy := 0
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) ||
			time.Since(c.accepted) > s.newGrace && c.state.CompareAndSwap(stateNew, stateClosed) {
			_ = c.nc.Close()
		} else if c.state.Load() != stateClosed {
			busy++
		}
	}
	return busy
}

func (s *Server) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.state.Store(stateClosed)
		_ = c.nc.Close()
	}
}

// Close stops the server at once, closing all connections. It is safe to
// call more than once and before or after Run.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.draining.Store(true)
		s.mu.Unlock()
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.closeErr = err
		}
		s.closeAll()
	})
	return s.closeErr
}

// A connection's states: accepted and not yet read from, waiting for a
// request, answering one, closed by the server.
const (
	stateNew int32 = iota
	stateIdle
	stateBusy
	stateClosed
)

// defaultNewGrace is how long a graceful shutdown lets a connection that
// has sent nothing yet live, as net/http does: its request may be on its
// way.
const defaultNewGrace = 5 * time.Second

// lingerTime is how long a connection refused mid-request keeps reading
// what the client still sends after the answer, so that the client reads
// the answer instead of a reset (the kernel resets a connection closed
// with unread data), as net/http does.
const lingerTime = 500 * time.Millisecond

// maxKeptBody is the largest echo body buffer a connection keeps for its
// next request; a larger one is left to the garbage collector.
const maxKeptBody = 1 << 20

type conn struct {
	s        *Server
	nc       *rawsock.TCPConn
	accepted time.Time
	state    atomic.Int32
	rd       reader
	h        head
	body     []byte
	out      []byte
	// date is the Date field's value, formatted once a second.
	date    []byte
	dateSec int64
	// peerHost is the client's address, for the peer workload.
	peerHost string
}

func newConn(s *Server, nc *rawsock.TCPConn) *conn {
	c := &conn{s: s, nc: nc, accepted: time.Now(), out: make([]byte, 0, 256)}
	c.rd = reader{src: idleReader{nc, s.cfg.IdleTimeout}, buf: make([]byte, initialBuffer)}
	if host, _, err := net.SplitHostPort(nc.RemoteAddr().String()); err == nil {
		c.peerHost = host
	} else {
		c.peerHost = nc.RemoteAddr().String()
	}
	return c
}

// idleReader arms the idle timeout before every read: a connection that
// sends nothing for that long is closed, between requests or within one.
type idleReader struct {
	nc   *rawsock.TCPConn
	idle time.Duration
}

func (r idleReader) Read(p []byte) (int, error) {
	if err := r.nc.SetReadDeadline(time.Now().Add(r.idle)); err != nil {
		return 0, err
	}
	return r.nc.Read(p)
}

// serve answers requests until the client closes, a request is refused
// or the server drains.
func (c *conn) serve() {
	defer func() {
		c.state.Store(stateClosed)
		_ = c.nc.Close()
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
		c.s.wg.Done()
	}()
	for {
		if c.rd.buffered() == 0 {
			// Idle until the next request's first byte.
			if err := c.rd.fill(len(c.rd.buf)); err != nil {
				return
			}
		}
		if !c.state.CompareAndSwap(stateIdle, stateBusy) && !c.state.CompareAndSwap(stateNew, stateBusy) {
			return
		}
		if !c.exchange() {
			return
		}
		c.state.Store(stateIdle)
		if c.s.draining.Load() {
			return
		}
		if len(c.rd.buf) > initialBuffer && c.rd.buffered() == 0 {
			// A long head grew the buffer; idle connections keep little.
			c.rd.buf, c.rd.r, c.rd.w = make([]byte, initialBuffer), 0, 0
		}
	}
}

// exchange reads one request and answers it; it reports whether the
// connection may carry another.
func (c *conn) exchange() bool {
	h := &c.h
	if err := readHead(&c.rd, h); err != nil {
		return c.fail(err)
	}
	max := c.s.cfg.MaxBody
	if h.length > max {
		return c.fail(refuse(http.StatusRequestEntityTooLarge, "request body larger than %d bytes", max))
	}
	if h.expectContinue && h.hasBody() {
		if _, err := c.write([]byte("HTTP/1.1 100 Continue\r\n\r\n"), nil); err != nil {
			return false
		}
	}
	body, err := c.readBody(c.s.reply.kind == Echo)
	if err != nil {
		return c.fail(err)
	}
	ct, out := c.s.reply.answer(c, body)
	closing := h.close || c.s.draining.Load()
	if err := c.respond(http.StatusOK, ct, out, closing); err != nil {
		return false
	}
	if cap(c.body) > maxKeptBody {
		c.body = nil
	}
	if closing {
		c.linger()
	}
	return !closing
}

// readBody reads the request's body into c.body when keep is set, and
// discards it otherwise.
func (c *conn) readBody(keep bool) ([]byte, error) {
	h := &c.h
	limit := c.s.cfg.MaxBody
	switch {
	case h.chunked && keep:
		c.body = c.body[:0]
		err := readChunked(&c.rd, limit, func(p []byte) { c.body = append(c.body, p...) })
		return c.body, err
	case h.chunked:
		return nil, readChunked(&c.rd, limit, func([]byte) {})
	case h.length <= 0:
		return nil, nil
	case keep:
		// The buffer grows with what arrives, not with what the head
		// announced: a head alone must not hold MaxBody of memory.
		c.body = c.body[:0]
		for n := int64(0); n < h.length; {
			if n == int64(cap(c.body)) {
				c.body = slices.Grow(c.body, int(min(h.length-n, max(n, 64<<10))))
			}
			k := min(h.length-n, int64(cap(c.body))-n)
			if err := c.rd.readFull(c.body[n : n+k]); err != nil {
				return nil, err
			}
			n += k
			c.body = c.body[:n]
		}
		return c.body, nil
	default:
		return nil, c.rd.discard(h.length)
	}
}

// fail answers a refused request and reports that the connection ends.
func (c *conn) fail(err error) bool {
	var se *statusError
	if !errors.As(err, &se) {
		return false
	}
	msg := append([]byte(se.msg), '\n')
	if c.respond(se.status, textPlain, msg, true) == nil {
		c.linger()
	}
	return false
}

// linger ends the sending side and reads what the client still sends for
// a while before the connection is closed: closing with unread data makes
// the kernel reset the connection, which can destroy the answer before the
// client reads it (a refused body, requests pipelined behind a last one).
func (c *conn) linger() {
	_ = c.nc.CloseWrite()
	_ = c.nc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, c.nc, 1<<20)
}

// write writes bufs, giving up once writing them has taken the idle
// timeout: a client that never reads must not hold its connection.
func (c *conn) write(bufs ...[]byte) (int64, error) {
	if err := c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.IdleTimeout)); err != nil {
		return 0, err
	}
	return c.nc.WriteBuffers(bufs...)
}

// respond writes a response: status, the fields every answer has, and
// body (none to HEAD).
func (c *conn) respond(status int, contentType, body []byte, closing bool) error {
	b := append(c.out[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	b = append(b, "\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	if len(contentType) > 0 {
		b = append(b, "\r\nContent-Type: "...)
		b = append(b, contentType...)
	}
	b = append(b, "\r\nDate: "...)
	b = append(b, c.now()...)
	switch {
	case closing:
		b = append(b, "\r\nConnection: close"...)
	case c.h.minor == 0:
		b = append(b, "\r\nConnection: keep-alive"...)
	}
	b = append(b, "\r\n\r\n"...)
	c.out = b
	if c.h.isHead() {
		body = nil
	}
	_, err := c.write(b, body)
	return err
}

// now returns the Date field's value (RFC 9110 §6.6.1 asks an origin
// server with a clock for it).
func (c *conn) now() []byte {
	t := time.Now()
	if sec := t.Unix(); sec != c.dateSec || c.date == nil {
		c.date = t.UTC().AppendFormat(c.date[:0], http.TimeFormat)
		c.dateSec = sec
	}
	return c.date
}

var (
	textPlain   = []byte("text/plain; charset=utf-8")
	octetStream = []byte("application/octet-stream")
)

// replier is the workload: what it answers to a request.
type replier struct {
	kind  Kind
	fixed []byte
	peers *peerLog
}

func newReplier(cfg Config) replier {
	r := replier{kind: cfg.Kind}
	switch cfg.Kind {
	case Static:
		r.fixed = StaticBody(cfg.StaticSize)
	case Hello:
		r.fixed = []byte(HelloBody)
	case Peer:
		r.peers = &peerLog{out: cfg.Peers}
	}
	return r
}

// answer returns the content type and body of the answer to c's request,
// whose body (echo only) is body.
func (r replier) answer(c *conn, body []byte) (contentType, out []byte) {
	switch r.kind {
	case Echo:
		if len(c.h.contentType) > 0 {
			// Setting it spares the client sniffing the body.
			return c.h.contentType, body
		}
		return octetStream, body
	case Recv:
		return nil, nil
	case Peer:
		path := string(c.h.target)
		if u, err := url.ParseRequestURI(path); err == nil {
			path = u.Path
		}
		r.peers.report(c.peerHost, path)
		return textPlain, []byte(c.peerHost + "\n")
	default:
		return textPlain, r.fixed
	}
}

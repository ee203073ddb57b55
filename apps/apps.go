// Package apps holds the lab's workload servers: the HTTP functions the seed
// papers deploy in the serving cluster (seed 000's payload-echo, payload-recv
// and static-reply, seed 001's hello-world). They are deliberately trivial so
// that what a run measures is the network and the tool under test, not the
// application: no per-request logging, no allocation beyond the body, and
// HTTP/1.1 keep-alive as JMeter expects.
package apps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strait-net/strait/internal/rawsock"
)

// Kind names a workload.
type Kind string

// The workloads. Every kind answers any method on any path.
const (
	// Echo answers 200 with the request body, byte for byte, with
	// Content-Length set (seed 000 payload-echo, seed 001 payload-echo).
	Echo Kind = "echo"
	// Recv reads and discards the request body and answers 200 with an
	// empty body (seed 000 payload-recv).
	Recv Kind = "recv"
	// Static answers 200 with a fixed body of StaticSize bytes whatever the
	// request carried (seed 000 static-reply, 1000 bytes).
	Static Kind = "static"
	// Hello answers 200 with "Hello, World!" (seed 001 hello-world).
	Hello Kind = "hello"
	// Peer answers 200 with the address the request came from as this
	// server saw it, and writes it to Config.Peers. It is no seed's
	// workload: lab/kube asks a pod in one cluster which source address a
	// pod of another cluster has there (docs/lab-clusters.md, "Where").
	Peer Kind = "peer"
)

// Kinds lists every workload, in the order help texts show them.
var Kinds = []Kind{Echo, Recv, Static, Hello, Peer}

// HelloBody is what the hello workload answers.
const HelloBody = "Hello, World!"

// Defaults used where Config leaves a field zero.
const (
	DefaultListen          = ":8080"
	DefaultMaxBody         = 64 << 20
	DefaultStaticSize      = 1000
	DefaultShutdownTimeout = 5 * time.Second
	DefaultIdleTimeout     = 120 * time.Second
)

// Config describes one workload server. The zero value is an echo server on
// DefaultListen.
type Config struct {
	// Kind is the workload: echo, recv, static or hello. Empty means echo.
	Kind Kind
	// Listen is the TCP address to listen on, host:port; port 0 picks a free
	// port (see Server.Addr). Empty means DefaultListen.
	Listen string
	// MaxBody is the largest request body accepted, in bytes; larger bodies
	// get 413 and the connection is closed. Zero means DefaultMaxBody.
	MaxBody int64
	// StaticSize is the size of the static workload's body in bytes. Zero
	// means DefaultStaticSize (seed 000's 1000 bytes).
	StaticSize int
	// IdleTimeout closes keep-alive connections idle for this long. Zero
	// means DefaultIdleTimeout; it must outlast any think time of a load
	// generator, or the load generator pays reconnections.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown when Run's context ends;
	// connections still busy after it are closed. Zero means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Logger receives start and stop messages and server errors; nil
	// discards them.
	Logger *slog.Logger
	// Peers receives, for the peer workload, a line "peer ADDRESS PATH"
	// per request: its source address and path, so that whoever runs the
	// server learns the address without being the client. Nil: nowhere.
	Peers io.Writer
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Kind != "" && !validKind(c.Kind) {
		return fmt.Errorf("kind %q: must be one of %s", c.Kind, kindList())
	}
	if c.Listen != "" {
		_, port, err := net.SplitHostPort(c.Listen)
		if err != nil {
			return fmt.Errorf("listen %q: want host:port: %w", c.Listen, err)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("listen %q: port must be a number 0-65535", c.Listen)
		}
	}
	if c.MaxBody < 0 {
		return fmt.Errorf("max body %d: must not be negative", c.MaxBody)
	}
	if c.StaticSize < 0 {
		return fmt.Errorf("static size %d: must not be negative", c.StaticSize)
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("idle timeout %v: must not be negative", c.IdleTimeout)
	}
	if c.ShutdownTimeout < 0 {
		return fmt.Errorf("shutdown timeout %v: must not be negative", c.ShutdownTimeout)
	}
	return nil
}

func validKind(k Kind) bool {
	for _, v := range Kinds {
		if k == v {
			return true
		}
	}
	return false
}

func kindList() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Kind == "" {
		c.Kind = Echo
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.StaticSize == 0 {
		c.StaticSize = DefaultStaticSize
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Handler returns the workload's HTTP handler, for callers that serve it
// themselves. cfg must be valid.
func Handler(cfg Config) http.Handler {
	cfg = cfg.withDefaults()
	h := &handler{max: cfg.MaxBody}
	switch cfg.Kind {
	case Recv:
		return http.HandlerFunc(h.recv)
	case Static:
		return &fixed{h: h, body: StaticBody(cfg.StaticSize), contentType: "text/plain; charset=utf-8"}
	case Hello:
		return &fixed{h: h, body: []byte(HelloBody), contentType: "text/plain; charset=utf-8"}
	case Peer:
		return &peer{h: h, out: cfg.Peers}
	default:
		return http.HandlerFunc(h.echo)
	}
}

// StaticBody returns the static workload's body of n bytes: printable,
// deterministic text, so a capture or a client can check it.
func StaticBody(n int) []byte {
	const line = "strait static reply 0123456789 abcdefghijklmnopqrstuvwxyz\n"
	b := bytes.Repeat([]byte(line), n/len(line)+1)
	return b[:n]
}

// Server is a listening workload server.
type Server struct {
	cfg       Config
	ln        net.Listener
	srv       *http.Server
	closeOnce sync.Once
	closeErr  error
	// handlers counts requests in flight: http.Server.Close does not wait
	// for them, and Run must not return while any of our code runs. (Not
	// a WaitGroup: a request may still start while Run waits.)
	handlers atomic.Int64
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
	// Reads and writes are raw system calls (internal/rawsock): the server
	// shares the host's CPUs with the tool under test, so what it spends
	// is taken from every tool (README, "What the cell asks of this host").
	s := &Server{cfg: cfg, ln: rawsock.Listener{Listener: ln}}
	h := Handler(cfg)
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.handlers.Add(1)
			defer s.handlers.Add(-1)
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Addr is the bound address, with the real port when Config.Listen asked
// for port 0.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Kind is the workload this server runs.
func (s *Server) Kind() Kind { return s.cfg.Kind }

// Run serves until ctx ends or Close is called. When ctx ends it shuts
// down gracefully: it stops accepting, lets requests in flight finish for
// up to ShutdownTimeout, and closes the rest. It returns nil after a
// requested stop, and only after every handler has returned.
func (s *Server) Run(ctx context.Context) error {
	s.cfg.Logger.Debug("serving", "kind", s.cfg.Kind, "addr", s.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	var err error
	select {
	case err = <-errc:
		// Close was called (ErrServerClosed), or accepting failed.
		_ = s.Close()
	case <-ctx.Done():
		s.shutdown()
		err = <-errc
	}
	s.waitHandlers()
	s.cfg.Logger.Debug("stopped", "kind", s.cfg.Kind, "addr", s.Addr().String())
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", s.Addr(), err)
	}
	return nil
}

// waitHandlers waits until no handler runs. Connections are closed by
// then, so handlers end quickly; polling, as http.Server.Shutdown does,
// is enough.
func (s *Server) waitHandlers() {
	for s.handlers.Load() > 0 {
		time.Sleep(time.Millisecond)
	}
}

func (s *Server) shutdown() {
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		// Busy past the deadline: cut them off. That is the point of the
		// deadline, not a failure of the server.
		_ = s.srv.Close()
	}
}

// Close stops the server at once, closing all connections. It is safe to
// call more than once and before or after Run.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		// http.Server.Close only knows the listener once Serve runs.
		s.closeErr = s.srv.Close()
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) && s.closeErr == nil {
			s.closeErr = err
		}
	})
	return s.closeErr
}

type handler struct {
	max  int64
	pool sync.Pool // *[]byte, echo bodies
}

// readAll reads the whole body into a pooled buffer. It answers 413 itself
// and returns ok=false when the body is too large or cannot be read.
func (h *handler) readAll(w http.ResponseWriter, r *http.Request) (buf *[]byte, ok bool) {
	if r.ContentLength > h.max {
		tooLarge(w, h.max)
		return nil, false
	}
	bp, _ := h.pool.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	b := (*bp)[:0]
	if r.ContentLength > 0 && int64(cap(b)) < r.ContentLength {
		b = make([]byte, 0, r.ContentLength)
	}
	// MaxBytesReader also covers chunked bodies, whose size is unknown up
	// front, and makes the server close the connection after the 413.
	body := http.MaxBytesReader(w, r.Body, h.max)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			*bp = b
			h.pool.Put(bp)
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				tooLarge(w, h.max)
			} else {
				http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			}
			return nil, false
		}
	}
	*bp = b
	return bp, true
}

// discard reads and drops the body, so that the connection stays usable
// for the next keep-alive request (Go's server closes connections whose
// unread body exceeds 256 KiB).
func (h *handler) discard(w http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength > h.max {
		tooLarge(w, h.max)
		return false
	}
	_, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, h.max))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			tooLarge(w, h.max)
		} else {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		}
		return false
	}
	return true
}

func tooLarge(w http.ResponseWriter, max int64) {
	w.Header().Set("Connection", "close")
	http.Error(w, "request body larger than "+strconv.FormatInt(max, 10)+" bytes", http.StatusRequestEntityTooLarge)
}

func (h *handler) echo(w http.ResponseWriter, r *http.Request) {
	bp, ok := h.readAll(w, r)
	if !ok {
		return
	}
	defer h.pool.Put(bp)
	body := *bp
	hdr := w.Header()
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		// Setting it spares the server sniffing the body.
		ct = "application/octet-stream"
	}
	hdr.Set("Content-Type", ct)
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func (h *handler) recv(w http.ResponseWriter, r *http.Request) {
	if !h.discard(w, r) {
		return
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusOK)
}

type fixed struct {
	h           *handler
	body        []byte
	contentType string
}

func (f *fixed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !f.h.discard(w, r) {
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", f.contentType)
	hdr.Set("Content-Length", strconv.Itoa(len(f.body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(f.body)
}

// peer answers with the request's source address (the host part of
// RemoteAddr: the connection's, not a header a proxy could set).
type peer struct {
	h   *handler
	mu  sync.Mutex
	out io.Writer
}

func (p *peer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.h.discard(w, r) {
		return
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if p.out != nil {
		p.mu.Lock()
		// The path goes out quoted: a line per request whatever it holds.
		_, _ = fmt.Fprintf(p.out, "peer %s %q\n", host, r.URL.Path)
		p.mu.Unlock()
	}
	body := host + "\n"
	hdr := w.Header()
	hdr.Set("Content-Type", "text/plain; charset=utf-8")
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, body)
}

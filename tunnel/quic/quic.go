// Package quic is the QUIC transport of package tunnel (quic-go): every
// tunnel stream is one QUIC stream whose first bytes are the stream header,
// framed as a 2-byte big-endian length and the header. QUIC has no reason
// text on RESET_STREAM, so a Reset's reason travels on a unidirectional
// control stream each side opens at start (records: 8-byte stream ID, 2-byte
// length, reason) just before the reset; the peer's error carries it when it
// arrived within 100 ms, else "reset".
package quic

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/strait-net/strait/tunnel"
)

const (
	alpn = "strait-quic/1"

	codeReset     quicgo.StreamErrorCode = 1 // Reset with a reason
	codeClosed    quicgo.StreamErrorCode = 2 // Close with unread data
	codeProtocol                         = quicgo.ApplicationErrorCode(1)
	maxReasonLen                         = 1024
	headerTimeout                        = 10 * time.Second
)

// Config configures the QUIC transport. As with tunnel.Config, ClientTLS is
// needed to dial and ServerTLS (with client certificates required) to
// listen; zero fields take the defaults in their comments.
type Config struct {
	ClientTLS    *tls.Config
	ServerTLS    *tls.Config
	PeerIdentity func(tls.ConnectionState) (string, error) // default tunnel.URIIdentity
	// MaxHeaderSize (default 4096, at most 65535): a larger header is a
	// protocol violation that closes the connection.
	MaxHeaderSize int
	// MaxStreamWindow (default 16 MiB) and MaxSessionWindow (default 2 ×
	// MaxStreamWindow) cap quic-go's auto-tuned receive windows.
	MaxStreamWindow  int
	MaxSessionWindow int
	// KeepaliveInterval (default 250ms) and KeepaliveTimeout (default 1s,
	// QUIC's idle timeout).
	KeepaliveInterval time.Duration
	KeepaliveTimeout  time.Duration
	// MaxIncomingStreams (default 4096) and AcceptBacklog (default 256).
	MaxIncomingStreams int
	AcceptBacklog      int
	Logger             *slog.Logger
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	switch {
	case c.MaxHeaderSize < 0 || c.MaxHeaderSize > 65535:
		return fmt.Errorf("quic config: MaxHeaderSize must be 0 (default) or 1..65535")
	case c.MaxStreamWindow < 0, c.MaxSessionWindow < 0, c.MaxIncomingStreams < 0, c.AcceptBacklog < 0:
		return fmt.Errorf("quic config: windows, MaxIncomingStreams and AcceptBacklog must be >= 0")
	case c.KeepaliveInterval < 0, c.KeepaliveTimeout < 0:
		return fmt.Errorf("quic config: KeepaliveInterval and KeepaliveTimeout must be >= 0")
	}
	d := c.withDefaults()
	if d.KeepaliveTimeout <= d.KeepaliveInterval {
		return fmt.Errorf("quic config: KeepaliveTimeout (%v) must exceed KeepaliveInterval (%v)", d.KeepaliveTimeout, d.KeepaliveInterval)
	}
	if c.ServerTLS != nil && c.ServerTLS.ClientAuth != tls.RequireAnyClientCert && c.ServerTLS.ClientAuth != tls.RequireAndVerifyClientCert {
		return fmt.Errorf("quic config: ServerTLS.ClientAuth must be RequireAndVerifyClientCert or RequireAnyClientCert (mutual authentication)")
	}
	return nil
}

func (c *Config) withDefaults() *Config {
	d := *c
	if d.PeerIdentity == nil {
		d.PeerIdentity = tunnel.URIIdentity
	}
	if d.MaxHeaderSize == 0 {
		d.MaxHeaderSize = 4096
	}
	if d.MaxStreamWindow == 0 {
		d.MaxStreamWindow = 16 << 20
	}
	if d.MaxSessionWindow == 0 {
		d.MaxSessionWindow = 2 * d.MaxStreamWindow
	}
	if d.KeepaliveInterval == 0 {
		d.KeepaliveInterval = 250 * time.Millisecond
	}
	if d.KeepaliveTimeout == 0 {
		d.KeepaliveTimeout = time.Second
	}
	if d.MaxIncomingStreams == 0 {
		d.MaxIncomingStreams = 4096
	}
	if d.AcceptBacklog == 0 {
		d.AcceptBacklog = 256
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return &d
}

func (c *Config) quicConfig() *quicgo.Config {
	return &quicgo.Config{
		KeepAlivePeriod:            c.KeepaliveInterval,
		MaxIdleTimeout:             c.KeepaliveTimeout,
		MaxStreamReceiveWindow:     uint64(c.MaxStreamWindow),
		MaxConnectionReceiveWindow: uint64(c.MaxSessionWindow),
		MaxIncomingStreams:         int64(c.MaxIncomingStreams),
		MaxIncomingUniStreams:      1,
	}
}

func tlsConfig(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.MinVersion = tls.VersionTLS13
	c.NextProtos = []string{alpn}
	return c
}

// Transport is the QUIC tunnel.Transport.
type Transport struct{ cfg *Config }

var _ tunnel.Transport = (*Transport)(nil)

// New returns the QUIC transport for cfg.
func New(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Transport{cfg: cfg.withDefaults()}, nil
}

func (t *Transport) Dial(ctx context.Context, addr string) (tunnel.Session, error) {
	if t.cfg.ClientTLS == nil {
		return nil, fmt.Errorf("dial %s: quic config: ClientTLS is required to dial", addr)
	}
	c, err := quicgo.DialAddr(ctx, addr, tlsConfig(t.cfg.ClientTLS), t.cfg.quicConfig())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	s, err := t.newSession(c)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return s, nil
}

func (t *Transport) Listen(addr string) (tunnel.Listener, error) {
	if t.cfg.ServerTLS == nil {
		return nil, fmt.Errorf("listen %s: quic config: ServerTLS is required to listen", addr)
	}
	ln, err := quicgo.ListenAddr(addr, tlsConfig(t.cfg.ServerTLS), t.cfg.quicConfig())
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return &listener{t: t, ln: ln}, nil
}

type listener struct {
	t  *Transport
	ln *quicgo.Listener
}

func (l *listener) Addr() net.Addr { return l.ln.Addr() }
func (l *listener) Close() error   { return l.ln.Close() }

func (l *listener) Accept(ctx context.Context) (tunnel.Session, error) {
	for {
		c, err := l.ln.Accept(ctx)
		if err != nil {
			return nil, fmt.Errorf("accept on %s: %w", l.ln.Addr(), err)
		}
		s, err := l.t.newSession(c)
		if err != nil {
			continue // closed with the reason; not returned, per the contract
		}
		return s, nil
	}
}

type session struct {
	c       *quicgo.Conn
	cfg     *Config
	peer    string
	acceptQ chan *stream
	wg      sync.WaitGroup

	ctrlMu  sync.Mutex
	ctrl    *quicgo.SendStream
	reasons sync.Map // quicgo.StreamID → string

	opened, accepted, refused, rstSent, rstRecv atomic.Uint64
	bytesSent, bytesRecv                        atomic.Uint64
}

func (t *Transport) newSession(c *quicgo.Conn) (*session, error) {
	peer, err := t.cfg.PeerIdentity(c.ConnectionState().TLS)
	if err != nil {
		_ = c.CloseWithError(codeProtocol, "peer identity")
		return nil, fmt.Errorf("peer identity: %w", err)
	}
	ctrl, err := c.OpenUniStream()
	if err != nil {
		_ = c.CloseWithError(codeProtocol, "control stream")
		return nil, fmt.Errorf("open control stream: %w", err)
	}
	s := &session{c: c, cfg: t.cfg, peer: peer, acceptQ: make(chan *stream, t.cfg.AcceptBacklog), ctrl: ctrl}
	s.wg.Add(2)
	go s.acceptLoop()
	go s.readControl()
	return s, nil
}

func (s *session) Peer() string          { return s.peer }
func (s *session) Done() <-chan struct{} { return s.c.Context().Done() }
func (s *session) RTT() time.Duration    { return s.c.ConnectionStats().SmoothedRTT }

func (s *session) Err() error {
	if s.c.Context().Err() == nil {
		return nil
	}
	return context.Cause(s.c.Context())
}

func (s *session) Close() error {
	_ = s.c.CloseWithError(0, "closed")
	s.wg.Wait()
	return nil
}

func (s *session) Stats() tunnel.Stats {
	return tunnel.Stats{
		StreamsOpened:   s.opened.Load(),
		StreamsAccepted: s.accepted.Load(),
		StreamsRefused:  s.refused.Load(),
		ResetsSent:      s.rstSent.Load(),
		ResetsReceived:  s.rstRecv.Load(),
		BytesSent:       s.bytesSent.Load(),
		BytesReceived:   s.bytesRecv.Load(),
		RTT:             s.RTT(),
		Congestion:      "quic",
	}
}

func (s *session) sessionErr(op string) error {
	return fmt.Errorf("%s: session to %s: %w", op, s.peer, s.Err())
}

func (s *session) OpenStream(ctx context.Context, header []byte) (tunnel.Stream, error) {
	if len(header) > s.cfg.MaxHeaderSize {
		return nil, fmt.Errorf("open stream: %w: %d bytes, maximum %d", tunnel.ErrHeaderTooLarge, len(header), s.cfg.MaxHeaderSize)
	}
	qs, err := s.c.OpenStreamSync(ctx)
	if err != nil {
		if s.Err() != nil {
			return nil, s.sessionErr("open stream")
		}
		return nil, fmt.Errorf("open stream: %w", err)
	}
	// The header is buffered and leaves with the first packet of data.
	b := make([]byte, 2+len(header))
	binary.BigEndian.PutUint16(b, uint16(len(header)))
	copy(b[2:], header)
	if _, err := qs.Write(b); err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	s.opened.Add(1)
	return &stream{s: s, qs: qs, header: append([]byte(nil), header...)}, nil
}

func (s *session) AcceptStream(ctx context.Context) (tunnel.Stream, error) {
	select {
	case st := <-s.acceptQ:
		return st, nil
	case <-s.Done():
		return nil, s.sessionErr("accept stream")
	case <-ctx.Done():
		return nil, fmt.Errorf("accept stream: %w", ctx.Err())
	}
}

// acceptLoop reads each new stream's header in its own goroutine, so a
// peer that opens a stream and stays silent delays nothing else.
func (s *session) acceptLoop() {
	defer s.wg.Done()
	ctx := s.c.Context()
	for {
		qs, err := s.c.AcceptStream(ctx)
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = qs.SetReadDeadline(time.Now().Add(headerTimeout))
			var lb [2]byte
			if _, err := io.ReadFull(qs, lb[:]); err != nil {
				qs.CancelRead(codeClosed)
				qs.CancelWrite(codeClosed)
				return
			}
			n := int(binary.BigEndian.Uint16(lb[:]))
			if n > s.cfg.MaxHeaderSize {
				_ = s.c.CloseWithError(codeProtocol, fmt.Sprintf("%v: stream header of %d bytes exceeds the maximum %d", tunnel.ErrProtocol, n, s.cfg.MaxHeaderSize))
				return
			}
			h := make([]byte, n)
			if _, err := io.ReadFull(qs, h); err != nil {
				qs.CancelRead(codeClosed)
				qs.CancelWrite(codeClosed)
				return
			}
			_ = qs.SetReadDeadline(time.Time{})
			st := &stream{s: s, qs: qs, header: h}
			select {
			case s.acceptQ <- st:
				s.accepted.Add(1)
			default:
				s.refused.Add(1)
				_ = st.Reset("accept backlog full")
			}
		}()
	}
}

func (s *session) readControl() {
	defer s.wg.Done()
	rs, err := s.c.AcceptUniStream(s.c.Context())
	if err != nil {
		return
	}
	var hb [10]byte
	for {
		if _, err := io.ReadFull(rs, hb[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hb[8:]))
		if n > maxReasonLen {
			_ = s.c.CloseWithError(codeProtocol, "reset reason too long")
			return
		}
		r := make([]byte, n)
		if _, err := io.ReadFull(rs, r); err != nil {
			return
		}
		s.reasons.Store(quicgo.StreamID(binary.BigEndian.Uint64(hb[:8])), string(r))
	}
}

func (s *session) sendReason(id quicgo.StreamID, reason string) {
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	b := make([]byte, 10+len(reason))
	binary.BigEndian.PutUint64(b, uint64(id))
	binary.BigEndian.PutUint16(b[8:], uint16(len(reason)))
	copy(b[10:], reason)
	s.ctrlMu.Lock()
	_, _ = s.ctrl.Write(b)
	s.ctrlMu.Unlock()
}

// reason waits briefly for the reason of a remote reset.
func (s *session) reason(id quicgo.StreamID) string {
	deadline := time.Now().Add(100 * time.Millisecond)
	for {
		if r, ok := s.reasons.LoadAndDelete(id); ok {
			return r.(string)
		}
		if time.Now().After(deadline) {
			return "reset"
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type stream struct {
	s      *session
	qs     *quicgo.Stream
	header []byte

	mu  sync.Mutex
	rst *tunnel.ResetError
}

func (st *stream) Header() []byte                     { return st.header }
func (st *stream) SetDeadline(t time.Time) error      { return st.qs.SetDeadline(t) }
func (st *stream) SetReadDeadline(t time.Time) error  { return st.qs.SetReadDeadline(t) }
func (st *stream) SetWriteDeadline(t time.Time) error { return st.qs.SetWriteDeadline(t) }

func (st *stream) Read(p []byte) (int, error) {
	n, err := st.qs.Read(p)
	st.s.bytesRecv.Add(uint64(n))
	return n, st.mapErr(err)
}

func (st *stream) Write(p []byte) (int, error) {
	n, err := st.qs.Write(p)
	st.s.bytesSent.Add(uint64(n))
	return n, st.mapErr(err)
}

func (st *stream) CloseWrite() error { return st.mapErr(st.qs.Close()) }

func (st *stream) Close() error {
	err := st.qs.Close()
	st.qs.CancelRead(codeClosed)
	return st.mapErr(err)
}

func (st *stream) Reset(reason string) error {
	st.mu.Lock()
	if st.rst != nil {
		st.mu.Unlock()
		return nil
	}
	st.rst = &tunnel.ResetError{Reason: reason}
	st.mu.Unlock()
	st.s.rstSent.Add(1)
	st.s.sendReason(st.qs.StreamID(), reason)
	st.qs.CancelWrite(codeReset)
	st.qs.CancelRead(codeReset)
	return nil
}

// mapErr turns quic-go errors into the tunnel contract's.
func (st *stream) mapErr(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.rst != nil {
		return st.rst
	}
	var se *quicgo.StreamError
	if errors.As(err, &se) {
		if !se.Remote {
			return tunnel.ErrClosedStream
		}
		reason := "stream closed by the receiver"
		if se.ErrorCode == codeReset {
			reason = st.s.reason(st.qs.StreamID())
		}
		st.s.rstRecv.Add(1)
		st.rst = &tunnel.ResetError{Reason: reason, Remote: true}
		return st.rst
	}
	if st.s.Err() != nil {
		return fmt.Errorf("session to %s: %w", st.s.peer, err)
	}
	return err
}

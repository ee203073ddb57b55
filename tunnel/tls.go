package tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Config configures the TLS-over-TCP transport and its multiplexer. The zero
// value plus ClientTLS (to dial) and ServerTLS (to listen) is a working
// configuration; every other zero field takes the default named in its
// comment.
type Config struct {
	// ClientTLS is used to dial. It must carry the client certificate and
	// the fabric CA. TLS 1.3 is enforced and the ALPN protocol
	// "strait-mux/1" is added.
	ClientTLS *tls.Config
	// ServerTLS is used to listen. ClientAuth must be RequireAnyClientCert or
	// RequireAndVerifyClientCert: sessions are mutually authenticated.
	ServerTLS *tls.Config
	// PeerIdentity derives the peer's identity from the completed handshake;
	// an error aborts the session. Default: URIIdentity.
	PeerIdentity func(tls.ConnectionState) (string, error)
	// DialContext opens the TCP connection. Default: net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// Congestion is the TCP congestion control for WAN sockets. "" means
	// strait's own (package wancc, registered once per process as
	// strait_<pid>; cubic where the kernel cannot load it) until the
	// session carries lossy bulk — the kernel retransmitted and 64 KiB or
	// more wait unsent behind the congestion window (lossyBulk in
	// session.go) — then bbr for good, when the kernel offers it. Strait's
	// own sends a burst at once, as cubic does, but takes a loss with no
	// queue behind it for random loss and cuts its window by an eighth
	// where cubic cuts 30 % and climbs back for seconds: a 100 KB echo at
	// seed 001's cloud10 (0.08 % loss) took 16 ms on it, 36 on cubic, 32
	// direct. bbr keeps a lossy long link full (1 MB echo at cloud30: 120
	// ms on bbr, 2.4 s on cubic) but paces every burst at its bandwidth
	// estimate, which on a session carrying requests and responses is the
	// rate of those small bursts, so each response leaves over a good part
	// of a round trip (10 KB echo at cloud30: 49 ms on bbr, 39 on cubic, 36
	// direct). The algorithm is set before the connection exists, and bbr
	// is never set to probe for it: the kernel paces a socket bbr ever
	// initialized on, for good, whatever it runs later; for the same reason
	// a switched socket is never switched back. "bbr" uses bbr from the
	// start, "cubic" cubic; "system" keeps the kernel default; any other
	// name is tried, and the kernel default stays if it is not available.
	// Stats.Congestion tells what the socket uses now. docs/congestion.md
	// and the README's "Performance" have the measurements.
	Congestion string
	// SendBuffer sets the socket send buffer, which must hold everything
	// in flight plus what awaits retransmission: 1 Gbit/s at 40 ms with some
	// loss needs well over the 4 MiB that wmem_max allows by default. With
	// CAP_NET_ADMIN it is forced past wmem_max (SO_SNDBUFFORCE), otherwise
	// the kernel caps it. 0 means 16 MiB, -1 keeps the kernel's auto-tuning.
	SendBuffer int
	// NotSentLowWater (TCP_NOTSENT_LOWAT) bounds the data queued in the
	// socket but not yet sent, so a large send buffer holds data in flight
	// rather than a queue that pings and window updates wait behind; our
	// own writer queue lets control frames jump ahead. 0 means 1 MiB, -1
	// leaves it unset.
	NotSentLowWater int
	// ReceiveBuffer sets SO_RCVBUF. 0 keeps the kernel's receive auto-tuning,
	// which grows to tcp_rmem's maximum and beats any fixed value on long
	// fat links; setting it turns auto-tuning off.
	ReceiveBuffer int
	// HandshakeTimeout bounds dialing plus the TLS handshake. Default 10s.
	HandshakeTimeout time.Duration

	// MaxHeaderSize is the largest stream header accepted (1..65535).
	// Default 4096. A peer sending a larger one violates the protocol.
	MaxHeaderSize int
	// MaxStreamWindow caps the auto-tuned receive window of one stream.
	// Default 16 MiB: one stream fills 1 Gbit/s up to ~130 ms RTT.
	MaxStreamWindow int
	// MaxSessionWindow caps the receive window of a whole session and the
	// growth of its streams' windows above 256 KiB, summed: a session holds
	// at most 256 KiB × streams + MaxSessionWindow unread, and streams whose
	// readers stall make no others wait (session.go, sessionCredit).
	// Default 4 × MaxStreamWindow.
	MaxSessionWindow int
	// InitialSessionWindow is the session window announced at start; it
	// grows to at least twice the largest stream window. Default
	// MaxSessionWindow: the session window is a memory cap, not a brake.
	InitialSessionWindow int
	// KeepaliveInterval is how often a session decides whether to ping.
	// Default 250ms. The dialer pings an interval in which nothing but
	// pongs arrived (unless a Pool dialed it: the pool probes then, see
	// PoolConfig.ProbeInterval); the acceptor answers and pings only after
	// a quarter of KeepaliveTimeout of silence; either pings at least once
	// a second (session.go, pingRule).
	KeepaliveInterval time.Duration
	// KeepaliveTimeout closes the session when nothing arrived for this
	// long. Default 1s. Must exceed KeepaliveInterval.
	KeepaliveTimeout time.Duration
	// AcceptBacklog is how many opened streams wait for AcceptStream before
	// new ones are refused. Default 256.
	AcceptBacklog int
	// MaxIncomingStreams refuses peer streams beyond this many open ones.
	// Default 4096.
	MaxIncomingStreams int
	// OnRTT, if set, receives every round-trip sample of the keepalives
	// (one per KeepaliveInterval on an idle dialed session, one a second
	// on a busy one), e.g. for a histogram. It
	// runs on the session's reader and must not block.
	OnRTT func(time.Duration)

	// Logger receives session-level events (never per-stream or per-packet
	// ones). Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	type check struct {
		ok    bool
		field string
		want  string
	}
	checks := []check{
		{c.SendBuffer >= -1, "SendBuffer", ">= -1"},
		{c.NotSentLowWater >= -1, "NotSentLowWater", ">= -1"},
		{c.ReceiveBuffer >= 0, "ReceiveBuffer", ">= 0"},
		{c.HandshakeTimeout >= 0, "HandshakeTimeout", ">= 0"},
		{c.MaxHeaderSize >= 0 && c.MaxHeaderSize <= maxHeaderSize, "MaxHeaderSize", fmt.Sprintf("0 (default) or 1..%d", maxHeaderSize)},
		{c.MaxStreamWindow == 0 || c.MaxStreamWindow >= initialStreamWindow, "MaxStreamWindow", fmt.Sprintf("0 (default) or >= %d", initialStreamWindow)},
		{c.MaxSessionWindow == 0 || c.MaxSessionWindow >= initialSessionWindow, "MaxSessionWindow", fmt.Sprintf("0 (default) or >= %d", initialSessionWindow)},
		{c.InitialSessionWindow == 0 || c.InitialSessionWindow >= initialSessionWindow, "InitialSessionWindow", fmt.Sprintf("0 (default) or >= %d", initialSessionWindow)},
		{c.KeepaliveInterval >= 0, "KeepaliveInterval", ">= 0"},
		{c.KeepaliveTimeout >= 0, "KeepaliveTimeout", ">= 0"},
		{c.AcceptBacklog >= 0, "AcceptBacklog", ">= 0"},
		{c.MaxIncomingStreams >= 0, "MaxIncomingStreams", ">= 0"},
	}
	for _, ch := range checks {
		if !ch.ok {
			return fmt.Errorf("tunnel config: %s must be %s", ch.field, ch.want)
		}
	}
	d := c.withDefaults()
	if d.KeepaliveTimeout <= d.KeepaliveInterval {
		return fmt.Errorf("tunnel config: KeepaliveTimeout (%v) must exceed KeepaliveInterval (%v)", d.KeepaliveTimeout, d.KeepaliveInterval)
	}
	if d.MaxSessionWindow < d.MaxStreamWindow {
		return fmt.Errorf("tunnel config: MaxSessionWindow (%d) must be >= MaxStreamWindow (%d)", d.MaxSessionWindow, d.MaxStreamWindow)
	}
	if d.InitialSessionWindow > d.MaxSessionWindow {
		return fmt.Errorf("tunnel config: InitialSessionWindow (%d) must be <= MaxSessionWindow (%d)", d.InitialSessionWindow, d.MaxSessionWindow)
	}
	if c.ServerTLS != nil && c.ServerTLS.ClientAuth != tls.RequireAnyClientCert && c.ServerTLS.ClientAuth != tls.RequireAndVerifyClientCert {
		return fmt.Errorf("tunnel config: ServerTLS.ClientAuth must be RequireAndVerifyClientCert or RequireAnyClientCert (mutual authentication)")
	}
	return nil
}

func (c *Config) withDefaults() *Config {
	d := *c
	def := func(v *int, x int) {
		if *v == 0 {
			*v = x
		}
	}
	defd := func(v *time.Duration, x time.Duration) {
		if *v == 0 {
			*v = x
		}
	}
	def(&d.SendBuffer, 16<<20)
	def(&d.NotSentLowWater, 1<<20)
	defd(&d.HandshakeTimeout, 10*time.Second)
	def(&d.MaxHeaderSize, 4096)
	def(&d.MaxStreamWindow, 16<<20)
	def(&d.MaxSessionWindow, 4*d.MaxStreamWindow)
	def(&d.InitialSessionWindow, d.MaxSessionWindow)
	defd(&d.KeepaliveInterval, 250*time.Millisecond)
	defd(&d.KeepaliveTimeout, time.Second)
	def(&d.AcceptBacklog, 256)
	def(&d.MaxIncomingStreams, 4096)
	if d.PeerIdentity == nil {
		d.PeerIdentity = URIIdentity
	}
	if d.DialContext == nil {
		d.DialContext = (&net.Dialer{Control: presetCongestion(&d)}).DialContext
	}
	return &d
}

func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// URIIdentity returns the first URI SAN of the peer's leaf certificate, e.g.
// spiffe://fabric/cluster/east.
func URIIdentity(cs tls.ConnectionState) (string, error) {
	if len(cs.PeerCertificates) == 0 {
		return "", errors.New("peer sent no certificate")
	}
	if u := cs.PeerCertificates[0].URIs; len(u) > 0 {
		return u[0].String(), nil
	}
	return "", errors.New("peer certificate has no URI SAN")
}

// TLSTransport is the TLS 1.3 over TCP Transport with the strait
// multiplexer.
type TLSTransport struct {
	cfg *Config
}

// NewTLS returns the TLS transport for cfg.
func NewTLS(cfg Config) (*TLSTransport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &TLSTransport{cfg: cfg.withDefaults()}, nil
}

func muxTLS(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.MinVersion = tls.VersionTLS13
	c.NextProtos = []string{protocolALPN}
	return c
}

// Dial connects to a peer gateway, completes the mutually authenticated
// handshake and starts the session.
func (t *TLSTransport) Dial(ctx context.Context, addr string) (Session, error) {
	if t.cfg.ClientTLS == nil {
		return nil, fmt.Errorf("dial %s: tunnel config: ClientTLS is required to dial", addr)
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.HandshakeTimeout)
	defer cancel()
	raw, err := t.cfg.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	s, err := t.handshake(ctx, raw, true)
	if err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return s, nil
}

func (t *TLSTransport) handshake(ctx context.Context, raw net.Conn, client bool) (*session, error) {
	cc, upgrade := tuneTCP(raw, t.cfg)
	batch := newRecordBatcher(raw)
	var tc *tls.Conn
	if client {
		tc = tls.Client(batch, muxTLS(t.cfg.ClientTLS))
	} else {
		tc = tls.Server(batch, muxTLS(t.cfg.ServerTLS))
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	cs := tc.ConnectionState()
	if cs.NegotiatedProtocol != protocolALPN {
		return nil, fmt.Errorf("tls handshake: peer does not speak %s", protocolALPN)
	}
	peer, err := t.cfg.PeerIdentity(cs)
	if err != nil {
		return nil, fmt.Errorf("peer identity: %w", err)
	}
	return newSession(tc, batch, client, peer, cc, upgrade, t.cfg), nil
}

// Listen accepts sessions on addr (host:port, port 0 picks one).
func (t *TLSTransport) Listen(addr string) (Listener, error) {
	if t.cfg.ServerTLS == nil {
		return nil, fmt.Errorf("listen %s: tunnel config: ServerTLS is required to listen", addr)
	}
	ln, err := (&net.ListenConfig{Control: presetCongestion(t.cfg)}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	l := &tlsListener{t: t, ln: ln, ready: make(chan *session), closed: make(chan struct{})}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

type tlsListener struct {
	t         *TLSTransport
	ln        net.Listener
	ready     chan *session
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	mu        sync.Mutex
	err       error
}

func (l *tlsListener) Addr() net.Addr { return l.ln.Addr() }

// acceptLoop accepts TCP connections and handshakes each in its own
// goroutine, so a slow or hostile client cannot stall the others.
func (l *tlsListener) acceptLoop() {
	defer l.wg.Done()
	for {
		raw, err := l.ln.Accept()
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.close()
			return
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), l.t.cfg.HandshakeTimeout)
			defer cancel()
			go func() {
				select {
				case <-l.closed:
					cancel()
				case <-ctx.Done():
				}
			}()
			s, err := l.t.handshake(ctx, raw, false)
			if err != nil {
				_ = raw.Close()
				return
			}
			select {
			case l.ready <- s:
			case <-l.closed:
				_ = s.Close()
			}
		}()
	}
}

func (l *tlsListener) Accept(ctx context.Context) (Session, error) {
	select {
	case s := <-l.ready:
		return s, nil
	case <-l.closed:
		return nil, fmt.Errorf("accept on %s: %w", l.ln.Addr(), net.ErrClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("accept on %s: %w", l.ln.Addr(), ctx.Err())
	}
}

// Close stops accepting, waits for handshakes in progress to end and
// returns. Sessions already accepted stay open.
func (l *tlsListener) Close() error {
	l.close()
	l.wg.Wait()
	return nil
}

func (l *tlsListener) close() {
	l.closeOnce.Do(func() {
		close(l.closed)
		_ = l.ln.Close()
	})
}

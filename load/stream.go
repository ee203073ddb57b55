package load

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The stream test is iperf/uperf-like raw TCP between RunStream and a
// StreamServer: bulk throughput in either direction, or request/response
// ping-pong. Each TCP connection carries one test; a run of P parallel
// streams opens P connections. The wire format (all integers big-endian):
//
// Handshake, client → server, first HandshakeLen (36) bytes:
//
//	0   4  magic "STRM"
//	4   1  version, 1
//	5   1  mode: 1 forward (client sends), 2 reverse (server sends), 3 rr
//	6   2  reserved, 0
//	8   4  request size in bytes (rr: 1..MaxMessage; else 0)
//	12  4  response size in bytes (rr: 1..MaxMessage; else 0)
//	16  4  duration in milliseconds, 1..MaxStreamDuration; the server
//	       sends no longer than this (reverse) and drops the connection
//	       when the test outlives it by its grace period
//	20  16 congestion control for the server's socket, ASCII, NUL-padded;
//	       all NUL means the server's default
//
// Ack, server → client: magic "STRA", status (0 accepted, 1 rejected), a
// length n ≤ 255 and n bytes of printable ASCII: when accepted, the
// congestion control of the server's socket; when rejected, why. A
// rejected connection is closed after the ack.
//
// Then, by mode:
//   - forward: the client writes payload and half-closes (FIN); the server
//     reads to EOF and answers with the trailer.
//   - reverse: the server writes payload (at least one write) until the
//     duration ends or the client half-closes, then the trailer, then closes. The client cannot
//     tell payload from trailer as they arrive, so the trailer is by
//     definition the last TrailerLen bytes before EOF.
//   - rr: the client writes a request of the request size and waits for a
//     response of the response size, over and over; it ends by
//     half-closing between transactions, and the server answers with the
//     trailer.
//
// Trailer, server → client, TrailerLen (24) bytes:
//
//	0   4  magic "STRE"
//	4   4  TCP_INFO total retransmits of the server's socket
//	       (0xffffffff: unknown)
//	8   8  payload bytes the server received (forward, rr) or sent (reverse)
//	16  8  transactions answered (rr), else 0
const (
	HandshakeLen = 36
	TrailerLen   = 24
	// MaxMessage bounds the rr sizes: the server holds one request and one
	// response per connection in memory.
	MaxMessage = 64 << 20
	// MaxStreamDuration bounds a test's duration.
	MaxStreamDuration = time.Hour
	// MaxParallel bounds StreamConfig.Parallel.
	MaxParallel = 128
	// maxCC is TCP_CA_NAME_MAX (16) less the terminating NUL.
	maxCC = 15
)

// Defaults used where StreamConfig and StreamServerConfig leave a field
// zero.
const (
	DefaultStreamListen     = ":5201"
	DefaultStreamServer     = "127.0.0.1:5201"
	DefaultStreamDuration   = 10 * time.Second
	DefaultStreamMaxConns   = 64
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultStreamGrace      = 30 * time.Second
)

var (
	handshakeMagic = [4]byte{'S', 'T', 'R', 'M'}
	ackMagic       = [4]byte{'S', 'T', 'R', 'A'}
	trailerMagic   = [4]byte{'S', 'T', 'R', 'E'}
)

const (
	protoVersion   = 1
	unknownRetrans = math.MaxUint32
	// ioSize is the size of one write of bulk payload and of the read
	// buffers: large enough that per-call costs vanish (iperf3 uses
	// 128 KiB for TCP too).
	ioSize = 128 << 10
)

// StreamMode is what a stream connection tests.
type StreamMode uint8

// The modes, as numbered on the wire.
const (
	ModeForward StreamMode = 1 // client → server bulk
	ModeReverse StreamMode = 2 // server → client bulk
	ModeRR      StreamMode = 3 // request/response
)

func (m StreamMode) String() string {
	switch m {
	case ModeForward:
		return "forward"
	case ModeReverse:
		return "reverse"
	case ModeRR:
		return "rr"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// Handshake is the first message of a stream connection.
type Handshake struct {
	Mode StreamMode
	// RequestSize and ResponseSize are the rr message sizes; zero in the
	// bulk modes.
	RequestSize, ResponseSize uint32
	// Duration is the test's length, in whole milliseconds on the wire.
	Duration time.Duration
	// CC is the congestion control the server should use; empty means its
	// default.
	CC string
}

// Validate reports the first invalid field.
func (h Handshake) Validate() error {
	switch h.Mode {
	case ModeForward, ModeReverse:
		if h.RequestSize != 0 || h.ResponseSize != 0 {
			return fmt.Errorf("message sizes %d/%d: must be 0 in mode %v", h.RequestSize, h.ResponseSize, h.Mode)
		}
	case ModeRR:
		if h.RequestSize < 1 || h.RequestSize > MaxMessage {
			return fmt.Errorf("request size %d: must be between 1 and %d", h.RequestSize, MaxMessage)
		}
		if h.ResponseSize < 1 || h.ResponseSize > MaxMessage {
			return fmt.Errorf("response size %d: must be between 1 and %d", h.ResponseSize, MaxMessage)
		}
	default:
		return fmt.Errorf("mode %d: must be 1 (forward), 2 (reverse) or 3 (rr)", h.Mode)
	}
	if h.Duration < time.Millisecond || h.Duration > MaxStreamDuration {
		return fmt.Errorf("duration %v: must be between 1ms and %v", h.Duration, MaxStreamDuration)
	}
	return validCC(h.CC)
}

func validCC(cc string) error {
	if len(cc) > maxCC {
		return fmt.Errorf("congestion control %q: longer than %d bytes", cc, maxCC)
	}
	for i := 0; i < len(cc); i++ {
		b := cc[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_' || b == '-') {
			return fmt.Errorf("congestion control %q: only letters, digits, _ and - are allowed", cc)
		}
	}
	return nil
}

// MarshalBinary encodes h; it fails for an invalid h.
func (h Handshake) MarshalBinary() ([]byte, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, HandshakeLen)
	copy(b, handshakeMagic[:])
	b[4] = protoVersion
	b[5] = byte(h.Mode)
	binary.BigEndian.PutUint32(b[8:], h.RequestSize)
	binary.BigEndian.PutUint32(b[12:], h.ResponseSize)
	binary.BigEndian.PutUint32(b[16:], uint32(h.Duration/time.Millisecond))
	copy(b[20:], h.CC)
	return b, nil
}

// DecodeHandshake decodes exactly HandshakeLen bytes and validates them.
func DecodeHandshake(b []byte) (Handshake, error) {
	if len(b) != HandshakeLen {
		return Handshake{}, fmt.Errorf("handshake: %d bytes, want %d", len(b), HandshakeLen)
	}
	if !bytes.Equal(b[:4], handshakeMagic[:]) {
		return Handshake{}, fmt.Errorf("handshake: magic %q, want %q (not a strait stream client?)", b[:4], handshakeMagic[:])
	}
	if b[4] != protoVersion {
		return Handshake{}, fmt.Errorf("handshake: version %d, want %d", b[4], protoVersion)
	}
	if b[6] != 0 || b[7] != 0 {
		return Handshake{}, errors.New("handshake: reserved bytes must be 0")
	}
	cc := b[20:]
	if i := bytes.IndexByte(cc, 0); i >= 0 {
		if bytes.IndexFunc(cc[i:], func(r rune) bool { return r != 0 }) >= 0 {
			return Handshake{}, errors.New("handshake: congestion control: bytes after the NUL padding")
		}
		cc = cc[:i]
	}
	if len(cc) > maxCC {
		return Handshake{}, fmt.Errorf("handshake: congestion control longer than %d bytes", maxCC)
	}
	h := Handshake{
		Mode:         StreamMode(b[5]),
		RequestSize:  binary.BigEndian.Uint32(b[8:]),
		ResponseSize: binary.BigEndian.Uint32(b[12:]),
		Duration:     time.Duration(binary.BigEndian.Uint32(b[16:])) * time.Millisecond,
		CC:           string(cc),
	}
	if err := h.Validate(); err != nil {
		return Handshake{}, fmt.Errorf("handshake: %w", err)
	}
	return h, nil
}

func appendAck(b []byte, ok bool, text string) []byte {
	if len(text) > 255 {
		text = text[:255]
	}
	status := byte(1)
	if ok {
		status = 0
	}
	b = append(b, ackMagic[:]...)
	b = append(b, status, byte(len(text)))
	return append(b, text...)
}

// readAck reads an ack; a rejection is returned as an error carrying the
// server's reason.
func readAck(r io.Reader) (cc string, err error) {
	var hdr [6]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return "", fmt.Errorf("read ack: server closed the connection before answering (busy, or not a strait stream server): %w", err)
		}
		return "", fmt.Errorf("read ack: %w", err)
	}
	if !bytes.Equal(hdr[:4], ackMagic[:]) {
		return "", fmt.Errorf("read ack: magic %q, want %q (not a strait stream server?)", hdr[:4], ackMagic[:])
	}
	text := make([]byte, hdr[5])
	if _, err := io.ReadFull(r, text); err != nil {
		return "", fmt.Errorf("read ack: %w", err)
	}
	for _, c := range text {
		if c < ' ' || c > '~' {
			return "", errors.New("read ack: text is not printable ASCII")
		}
	}
	switch hdr[4] {
	case 0:
		return string(text), nil
	case 1:
		return "", fmt.Errorf("server rejected the test: %s", text)
	}
	return "", fmt.Errorf("read ack: status %d, want 0 or 1", hdr[4])
}

// trailer is the server's closing report.
type trailer struct {
	retrans      uint32
	bytes        uint64
	transactions uint64
}

func (t trailer) append(b []byte) []byte {
	b = append(b, trailerMagic[:]...)
	b = binary.BigEndian.AppendUint32(b, t.retrans)
	b = binary.BigEndian.AppendUint64(b, t.bytes)
	return binary.BigEndian.AppendUint64(b, t.transactions)
}

func decodeTrailer(b []byte) (trailer, error) {
	if len(b) != TrailerLen || !bytes.Equal(b[:4], trailerMagic[:]) {
		return trailer{}, errors.New("trailer: missing or malformed (connection cut short?)")
	}
	return trailer{
		retrans:      binary.BigEndian.Uint32(b[4:]),
		bytes:        binary.BigEndian.Uint64(b[8:]),
		transactions: binary.BigEndian.Uint64(b[16:]),
	}, nil
}

func setConnCC(c *net.TCPConn, cc string) error {
	sc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = setCC(fd, cc) }); err != nil {
		return err
	}
	return serr
}

// StreamServerConfig describes the server side of the stream test. The
// zero value listens on DefaultStreamListen.
type StreamServerConfig struct {
	// Listen is the TCP address, host:port; port 0 picks a free port.
	// Empty means DefaultStreamListen.
	Listen string
	// MaxConns bounds the connections served at once; more are closed at
	// once. Zero means DefaultStreamMaxConns.
	MaxConns int
	// HandshakeTimeout bounds the wait for a handshake after accepting.
	// Zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Grace is how long a test may outlive the duration its handshake
	// declared before the server drops it: room for a slow last
	// transaction or a backlog in socket buffers, while a client that
	// never ends cannot hold a connection forever. Zero means
	// DefaultStreamGrace.
	Grace time.Duration
	// Logger receives rejected handshakes and failed tests; nil discards.
	Logger *slog.Logger
	// OnSession, if set, receives each test's account when its connection
	// ends, from the connection's goroutine.
	OnSession func(StreamSession)
}

// StreamSession is the server's account of one connection.
type StreamSession struct {
	Remote string
	// Handshake is zero when the handshake was rejected.
	Handshake Handshake
	// Bytes is the payload received (forward, rr) or sent (reverse).
	Bytes int64
	// Transactions counts answered rr requests.
	Transactions int64
	// Retransmits is the socket's TCP_INFO total, -1 when unknown.
	Retransmits int64
	// CC is the socket's congestion control.
	CC string
	// Err says why the test failed or was rejected; nil when it ended
	// cleanly.
	Err error
}

// Validate reports the first invalid field.
func (c StreamServerConfig) Validate() error {
	if c.Listen != "" {
		if _, port, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("listen %q: want host:port: %w", c.Listen, err)
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("listen %q: port must be a number 0-65535", c.Listen)
		}
	}
	if c.MaxConns < 0 {
		return fmt.Errorf("max conns %d: must not be negative", c.MaxConns)
	}
	if c.HandshakeTimeout < 0 {
		return fmt.Errorf("handshake timeout %v: must not be negative", c.HandshakeTimeout)
	}
	if c.Grace < 0 {
		return fmt.Errorf("grace %v: must not be negative", c.Grace)
	}
	return nil
}

func (c StreamServerConfig) withDefaults() StreamServerConfig {
	if c.Listen == "" {
		c.Listen = DefaultStreamListen
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultStreamMaxConns
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.Grace == 0 {
		c.Grace = DefaultStreamGrace
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// StreamServer is a listening stream-test server.
type StreamServer struct {
	cfg       StreamServerConfig
	ln        net.Listener
	mu        sync.Mutex
	conns     map[net.Conn]struct{}
	closed    bool
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// ListenStream validates cfg and binds its address, so clients can
// connect as soon as it returns.
func ListenStream(ctx context.Context, cfg StreamServerConfig) (*StreamServer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	return &StreamServer{cfg: cfg, ln: ln, conns: map[net.Conn]struct{}{}}, nil
}

// Addr is the bound address.
func (s *StreamServer) Addr() net.Addr { return s.ln.Addr() }

// Run serves until ctx ends or Close is called, then closes every
// connection and returns after their goroutines have exited. It returns
// nil after a requested stop.
func (s *StreamServer) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	defer stop()
	var err error
	for {
		c, aerr := s.ln.Accept()
		if aerr != nil {
			if !errors.Is(aerr, net.ErrClosed) {
				err = fmt.Errorf("accept on %s: %w", s.Addr(), aerr)
			}
			break
		}
		s.mu.Lock()
		if s.closed || len(s.conns) >= s.cfg.MaxConns {
			s.mu.Unlock()
			s.cfg.Logger.Warn("stream: connection refused", "remote", c.RemoteAddr().String(), "reason", "max conns")
			_ = c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			s.serve(c.(*net.TCPConn))
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			_ = c.Close()
		})
	}
	_ = s.Close()
	s.wg.Wait()
	return err
}

// Close stops the server at once, closing all connections. It is safe to
// call more than once.
func (s *StreamServer) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.closeErr = err
		}
	})
	return s.closeErr
}

func (s *StreamServer) serve(c *net.TCPConn) {
	sess := StreamSession{Remote: c.RemoteAddr().String(), Retransmits: -1}
	defer func() {
		if sess.Err != nil {
			s.cfg.Logger.Warn("stream test failed", "remote", sess.Remote, "mode", sess.Handshake.Mode.String(), "err", sess.Err)
		}
		if s.cfg.OnSession != nil {
			s.cfg.OnSession(sess)
		}
	}()
	_ = c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	var hb [HandshakeLen]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		sess.Err = fmt.Errorf("read handshake: %w", err)
		return
	}
	h, err := DecodeHandshake(hb[:])
	if err == nil && h.CC != "" {
		err = setConnCC(c, h.CC)
	}
	if err != nil {
		sess.Err = err
		_, _ = c.Write(appendAck(nil, false, err.Error()))
		// Read what else the client sent before closing: closing with
		// unread bytes sends a reset, which may destroy the ack before
		// the client reads it. Bounded in time and bytes.
		_ = c.CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
		return
	}
	sess.Handshake = h
	sess.CC, _ = tcpState(c)
	if _, err := c.Write(appendAck(nil, true, sess.CC)); err != nil {
		sess.Err = fmt.Errorf("write ack: %w", err)
		return
	}
	start := time.Now()
	_ = c.SetDeadline(start.Add(h.Duration + s.cfg.Grace))
	var t trailer
	switch h.Mode {
	case ModeForward:
		t.bytes, err = discard(c)
	case ModeReverse:
		t.bytes, err = sendUntil(c, start.Add(h.Duration))
	case ModeRR:
		t.bytes, t.transactions, err = answer(c, h)
	}
	sess.Bytes, sess.Transactions = int64(t.bytes), int64(t.transactions)
	_, sess.Retransmits = tcpState(c)
	if err != nil {
		sess.Err = err
		return
	}
	t.retrans = unknownRetrans
	if sess.Retransmits >= 0 {
		t.retrans = uint32(min(sess.Retransmits, unknownRetrans-1))
	}
	if _, err := c.Write(t.append(nil)); err != nil {
		sess.Err = fmt.Errorf("write trailer: %w", err)
		return
	}
	// Half-close first, so the client reads EOF after the trailer, not a
	// reset caused by its own FIN racing our close.
	_ = c.CloseWrite()
}

// discard reads to EOF, counting.
func discard(c *net.TCPConn) (uint64, error) {
	buf := make([]byte, ioSize)
	var n uint64
	for {
		k, err := c.Read(buf)
		n += uint64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read payload after %d bytes: %w", n, err)
		}
	}
}

// sendUntil writes payload until end or until the client half-closes.
func sendUntil(c *net.TCPConn, end time.Time) (uint64, error) {
	stopped := make(chan struct{})
	// The reader only waits for the client's FIN; it ends when the
	// connection does, at the latest.
	go func() {
		defer close(stopped)
		var b [64]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				return
			}
		}
	}()
	defer func() {
		// Unblock and wait for the reader, so serve returns after it.
		_ = c.SetReadDeadline(time.Unix(1, 0))
		<-stopped
	}()
	buf := make([]byte, ioSize)
	FillPayload(buf, 0, 0)
	var n uint64
	// The first write goes out whatever the clock says: a sender that was
	// not scheduled until past the end still moves, and reports, some
	// bytes instead of an empty test.
	for {
		k, err := c.Write(buf)
		n += uint64(k)
		if err != nil {
			return n, fmt.Errorf("write payload after %d bytes: %w", n, err)
		}
		if !time.Now().Before(end) {
			return n, nil
		}
		select {
		case <-stopped:
			return n, nil
		default:
		}
	}
}

// answer serves rr transactions until the client half-closes between two
// of them.
func answer(c *net.TCPConn, h Handshake) (bytesIn, transactions uint64, err error) {
	req := make([]byte, h.RequestSize)
	resp := make([]byte, h.ResponseSize)
	FillPayload(resp, 0, 0)
	for {
		k, err := io.ReadFull(c, req)
		bytesIn += uint64(k)
		if err == io.EOF {
			return bytesIn, transactions, nil
		}
		if err != nil {
			return bytesIn, transactions, fmt.Errorf("read request %d after %d of %d bytes: %w", transactions+1, k, len(req), err)
		}
		if _, err := c.Write(resp); err != nil {
			return bytesIn, transactions, fmt.Errorf("write response %d: %w", transactions+1, err)
		}
		transactions++
	}
}

// StreamConfig describes the client side of a stream test. The zero value
// runs one forward bulk stream to DefaultStreamServer for
// DefaultStreamDuration.
type StreamConfig struct {
	// Server is host:port of a StreamServer. Empty means
	// DefaultStreamServer.
	Server string
	// Parallel is the number of connections, each its own stream (or rr
	// loop), run at the same time. Zero means 1.
	Parallel int
	// Duration is how long each connection sends (or ping-pongs). Zero
	// means DefaultStreamDuration.
	Duration time.Duration
	// Reverse makes the server the sender (iperf3 -R). Ignored for rr.
	Reverse bool
	// RR, when positive, runs request/response with messages of RR bytes
	// each way instead of bulk transfer (uperf's rr profiles: 64, 1024,
	// 8192).
	RR int
	// CC is the TCP congestion control for both ends' sockets (the sender's
	// is the one that matters); empty leaves each end's default.
	CC string
	// ConnectTimeout bounds connecting and the handshake. Zero means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// Validate reports the first invalid field.
func (c StreamConfig) Validate() error {
	if c.Server != "" {
		if _, _, err := net.SplitHostPort(c.Server); err != nil {
			return fmt.Errorf("server %q: want host:port: %w", c.Server, err)
		}
	}
	if c.Parallel < 0 || c.Parallel > MaxParallel {
		return fmt.Errorf("parallel %d: must be between 0 and %d", c.Parallel, MaxParallel)
	}
	if c.Duration < 0 || c.Duration > MaxStreamDuration {
		return fmt.Errorf("duration %v: must be between 0 and %v", c.Duration, MaxStreamDuration)
	}
	if c.Duration > 0 && c.Duration < time.Millisecond {
		return fmt.Errorf("duration %v: must be at least 1ms", c.Duration)
	}
	if c.RR < 0 || c.RR > MaxMessage {
		return fmt.Errorf("rr %d: message size must be between 0 (bulk) and %d bytes", c.RR, MaxMessage)
	}
	if err := validCC(c.CC); err != nil {
		return fmt.Errorf("cc: %w", err)
	}
	if c.ConnectTimeout < 0 {
		return fmt.Errorf("connect timeout %v: must not be negative", c.ConnectTimeout)
	}
	return nil
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Server == "" {
		c.Server = DefaultStreamServer
	}
	c.Parallel = max(c.Parallel, 1)
	if c.Duration == 0 {
		c.Duration = DefaultStreamDuration
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.RR > 0 {
		c.Reverse = false
	}
	return c
}

func (c StreamConfig) handshake() Handshake {
	h := Handshake{Mode: ModeForward, Duration: c.Duration.Truncate(time.Millisecond), CC: c.CC}
	switch {
	case c.RR > 0:
		h.Mode, h.RequestSize, h.ResponseSize = ModeRR, uint32(c.RR), uint32(c.RR)
	case c.Reverse:
		h.Mode = ModeReverse
	}
	return h
}

// StreamStat is one connection's part of a StreamResult.
type StreamStat struct {
	// Bytes is the payload the receiving end got (bulk) or the requests
	// the server read (rr); SentBytes what the sending end wrote (bulk).
	Bytes     int64   `json:"bytes"`
	SentBytes int64   `json:"sent_bytes"`
	Seconds   float64 `json:"seconds"`
	Gbps      float64 `json:"gbit_s"`
	// Retransmits is the sender's TCP_INFO total; -1 when unknown.
	Retransmits int64 `json:"retransmits"`
	// Transactions counts rr round trips the client completed;
	// ServerTransactions those the server answered (equal when all went
	// well).
	Transactions       int64   `json:"transactions,omitempty"`
	ServerTransactions int64   `json:"server_transactions,omitempty"`
	TPS                float64 `json:"transactions_s,omitempty"`
}

// StreamResult is what RunStream measured; its JSON form is what
// `strait load stream --json` writes.
type StreamResult struct {
	Server string `json:"server"`
	// Mode is "stream" or "rr".
	Mode string `json:"mode"`
	// Direction is "client-to-server" or "server-to-client" (bulk), or
	// "both" (rr).
	Direction   string  `json:"direction"`
	Parallel    int     `json:"parallel"`
	DurationSec float64 `json:"duration_s"`
	// ElapsedSec spans from the first stream's start to the last one's
	// end, as the receiver saw it.
	ElapsedSec float64 `json:"elapsed_s"`
	// CC is the congestion control of the sending socket(s).
	CC          string       `json:"cc"`
	Bytes       int64        `json:"bytes"`
	SentBytes   int64        `json:"sent_bytes"`
	Gbps        float64      `json:"gbit_s"`
	Retransmits int64        `json:"retransmits"`
	Streams     []StreamStat `json:"streams"`
	// MessageSize, Transactions, TPS and Latency (round-trip time of one
	// transaction) are set for rr.
	MessageSize        int          `json:"message_bytes,omitempty"`
	Transactions       int64        `json:"transactions,omitempty"`
	ServerTransactions int64        `json:"server_transactions,omitempty"`
	TPS                float64      `json:"transactions_s,omitempty"`
	Latency            *Percentiles `json:"latency,omitempty"`

	latency *hdrhistogram.Histogram
}

// Histogram returns the rr round-trip histogram (µs); nil for bulk runs.
func (r *StreamResult) Histogram() *hdrhistogram.Histogram { return r.latency }

// WriteJSON writes r as indented JSON.
func (r *StreamResult) WriteJSON(w io.Writer) error { return writeJSON(w, r) }

// streamRun is one connection of a run.
type streamRun struct {
	conn       *net.TCPConn
	cc         string // of the sender's socket
	start, end time.Time
	stat       StreamStat
	hist       *hdrhistogram.Histogram
	err        error
}

// RunStream runs the test and returns its result. The error is non-nil for
// an invalid cfg, a failed connection (the result then holds what the
// other connections measured) or when ctx ends early.
func RunStream(ctx context.Context, cfg StreamConfig) (*StreamResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	h := cfg.handshake()
	hb, err := h.MarshalBinary()
	if err != nil {
		return nil, err
	}
	// Connect and handshake every connection before any sends, so the
	// streams overlap for the whole duration rather than ramping up.
	runs := make([]*streamRun, cfg.Parallel)
	defer func() {
		for _, r := range runs {
			if r != nil && r.conn != nil {
				_ = r.conn.Close()
			}
		}
	}()
	d := net.Dialer{Timeout: cfg.ConnectTimeout}
	if cfg.CC != "" {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = setCC(fd, cfg.CC) }); err != nil {
				return err
			}
			return serr
		}
	}
	for i := range runs {
		r := &streamRun{stat: StreamStat{Retransmits: -1}}
		runs[i] = r
		nc, err := d.DialContext(ctx, "tcp", cfg.Server)
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", cfg.Server, err)
		}
		r.conn = nc.(*net.TCPConn)
		_ = r.conn.SetDeadline(time.Now().Add(cfg.ConnectTimeout))
		if _, err := r.conn.Write(hb); err != nil {
			return nil, fmt.Errorf("write handshake to %s: %w", cfg.Server, err)
		}
		serverCC, err := readAck(r.conn)
		if isTimeout(err) {
			err = fmt.Errorf("no answer to the handshake within %v (is it a strait stream-server?)", cfg.ConnectTimeout)
		}
		if err != nil {
			return nil, fmt.Errorf("stream %d to %s: %w", i+1, cfg.Server, err)
		}
		r.start = time.Now()
		_ = r.conn.SetDeadline(time.Time{})
		r.cc = serverCC
		if h.Mode != ModeReverse {
			r.cc, _ = tcpState(r.conn)
		}
	}
	// Cancelling unblocks every connection; the per-stream deadline
	// bounds a server that stops answering.
	stop := context.AfterFunc(ctx, func() {
		for _, r := range runs {
			_ = r.conn.SetDeadline(time.Unix(1, 0))
		}
	})
	defer stop()
	var wg sync.WaitGroup
	for _, r := range runs {
		_ = r.conn.SetDeadline(time.Now().Add(cfg.Duration + DefaultStreamGrace))
		wg.Go(func() {
			switch h.Mode {
			case ModeForward:
				r.forward(cfg.Duration)
			case ModeReverse:
				r.reverse(cfg.Duration)
			case ModeRR:
				r.rr(cfg.Duration, cfg.RR)
			}
		})
	}
	wg.Wait()

	res := &StreamResult{
		Server: cfg.Server, Mode: "stream", Direction: "client-to-server",
		Parallel: cfg.Parallel, DurationSec: cfg.Duration.Seconds(), Retransmits: -1,
	}
	if h.Mode == ModeReverse {
		res.Direction = "server-to-client"
	}
	if h.Mode == ModeRR {
		res.Mode, res.Direction, res.MessageSize = "rr", "both", cfg.RR
		res.latency = newHist()
	}
	var errs []error
	var first, last time.Time
	for i, r := range runs {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("stream %d: %w", i+1, r.err))
		}
		if first.IsZero() || r.start.Before(first) {
			first = r.start
		}
		if r.end.After(last) {
			last = r.end
		}
		res.CC = r.cc
		res.Bytes += r.stat.Bytes
		res.SentBytes += r.stat.SentBytes
		if r.stat.Retransmits >= 0 {
			res.Retransmits = max(res.Retransmits, 0) + r.stat.Retransmits
		}
		res.Transactions += r.stat.Transactions
		res.ServerTransactions += r.stat.ServerTransactions
		if r.hist != nil {
			res.latency.Merge(r.hist)
		}
		res.Streams = append(res.Streams, r.stat)
	}
	if el := last.Sub(first); el > 0 {
		res.ElapsedSec = el.Seconds()
		res.Gbps = gbps(res.Bytes, el)
		if h.Mode == ModeRR {
			res.TPS = math.Round(float64(res.Transactions)/el.Seconds()*10) / 10
		}
	}
	if res.latency != nil {
		p := percentilesOf(res.latency)
		res.Latency = &p
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return res, errors.Join(errs...)
}

func gbps(n int64, d time.Duration) float64 {
	return math.Round(float64(n)*8/d.Seconds()/1e9*1000) / 1000
}

func (r *streamRun) finish() {
	if el := r.end.Sub(r.start); el > 0 {
		r.stat.Seconds = math.Round(el.Seconds()*1e6) / 1e6
		r.stat.Gbps = gbps(r.stat.Bytes, el)
		if r.stat.Transactions > 0 {
			r.stat.TPS = math.Round(float64(r.stat.Transactions)/el.Seconds()*10) / 10
		}
	}
}

// readTrailer half-closes and reads the server's trailer.
func (r *streamRun) readTrailer() (trailer, error) {
	if err := r.conn.CloseWrite(); err != nil {
		return trailer{}, fmt.Errorf("half-close: %w", err)
	}
	var b [TrailerLen]byte
	if _, err := io.ReadFull(r.conn, b[:]); err != nil {
		return trailer{}, fmt.Errorf("read trailer: %w", err)
	}
	return decodeTrailer(b[:])
}

func (r *streamRun) forward(d time.Duration) {
	defer r.finish()
	buf := make([]byte, ioSize)
	FillPayload(buf, 1, 1)
	end := r.start.Add(d)
	// At least one write, as in sendUntil: a run descheduled for its whole
	// duration still measures something.
	for first := true; first || time.Now().Before(end); first = false {
		n, err := r.conn.Write(buf)
		r.stat.SentBytes += int64(n)
		if err != nil {
			r.end, r.err = time.Now(), fmt.Errorf("write payload after %d bytes: %w", r.stat.SentBytes, err)
			return
		}
	}
	t, err := r.readTrailer()
	// The trailer's arrival is when the server had read the last byte:
	// the receiver's view, including what sat in socket buffers.
	r.end = time.Now()
	_, r.stat.Retransmits = tcpState(r.conn)
	if err != nil {
		r.err = err
		return
	}
	r.stat.Bytes = int64(t.bytes)
	if r.stat.Bytes != r.stat.SentBytes {
		r.err = fmt.Errorf("server received %d bytes, client sent %d", r.stat.Bytes, r.stat.SentBytes)
	}
}

func (r *streamRun) reverse(d time.Duration) {
	defer r.finish()
	// Our FIN tells the server to stop; it also stops on its own at the
	// duration the handshake carried.
	t := time.AfterFunc(d, func() { _ = r.conn.CloseWrite() })
	defer t.Stop()
	buf := make([]byte, ioSize)
	var tail [TrailerLen]byte
	var tn, total int
	for {
		n, err := r.conn.Read(buf)
		total += n
		// Keep the last TrailerLen bytes seen: at EOF they are the
		// trailer (see the wire format).
		if n >= TrailerLen {
			copy(tail[:], buf[n-TrailerLen:n])
			tn = TrailerLen
		} else if n > 0 {
			keep := min(tn, TrailerLen-n)
			copy(tail[:keep], tail[tn-keep:tn])
			copy(tail[keep:], buf[:n])
			tn = keep + n
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			r.end, r.err = time.Now(), fmt.Errorf("read payload after %d bytes: %w", total, err)
			r.stat.Bytes = int64(max(total-TrailerLen, 0))
			return
		}
	}
	r.end = time.Now()
	r.stat.Bytes = int64(max(total-TrailerLen, 0))
	tr, err := decodeTrailer(tail[:tn])
	if err != nil {
		r.err = err
		return
	}
	r.stat.SentBytes = int64(tr.bytes)
	if tr.retrans != unknownRetrans {
		r.stat.Retransmits = int64(tr.retrans)
	}
	if r.stat.Bytes != r.stat.SentBytes {
		r.err = fmt.Errorf("client received %d bytes, server sent %d", r.stat.Bytes, r.stat.SentBytes)
	}
}

func (r *streamRun) rr(d time.Duration, size int) {
	defer r.finish()
	r.hist = newHist()
	req := make([]byte, size)
	resp := make([]byte, size)
	FillPayload(req, 1, 1)
	end := r.start.Add(d)
	// At least one transaction, so that a run descheduled for its whole
	// duration still has a latency.
	for first := true; ; first = false {
		t0 := time.Now()
		if !first && !t0.Before(end) {
			break
		}
		if _, err := r.conn.Write(req); err != nil {
			r.end, r.err = time.Now(), fmt.Errorf("write request %d: %w", r.stat.Transactions+1, err)
			return
		}
		if _, err := io.ReadFull(r.conn, resp); err != nil {
			r.end, r.err = time.Now(), fmt.Errorf("read response %d: %w", r.stat.Transactions+1, err)
			return
		}
		_ = r.hist.RecordValue(min(time.Since(t0).Microseconds(), histMax))
		r.stat.Transactions++
		r.stat.SentBytes += int64(size)
	}
	r.end = time.Now()
	t, err := r.readTrailer()
	_, r.stat.Retransmits = tcpState(r.conn)
	if err != nil {
		r.err = err
		return
	}
	r.stat.Bytes = int64(t.bytes)
	r.stat.ServerTransactions = int64(t.transactions)
	if r.stat.ServerTransactions != r.stat.Transactions {
		r.err = fmt.Errorf("server answered %d transactions, client completed %d", r.stat.ServerTransactions, r.stat.Transactions)
	}
}

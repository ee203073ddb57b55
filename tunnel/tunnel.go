// Package tunnel carries service connections between gateways of different
// clusters: each client connection becomes a Stream inside a long-lived,
// mutually authenticated Session to a peer gateway.
//
// Two transports implement the same interfaces: TLS 1.3 over TCP with the
// strait multiplexer (NewTLS, this package; the wire format is specified in
// frame.go) and QUIC (package tunnel/quic). TLS over TCP is the default, by
// measurement: on loopback quic-go moves a single stream at about a quarter
// of the multiplexer's rate, and over an emulated 1 Gbit/s WAN with 0.08 %
// loss it collapses to tens of Mbit/s while TCP with BBR keeps most of the
// link (tunnel/quic's BenchmarkTransports and TestTransportsOverEmulatedWAN
// print both). Pool keeps several warm Sessions (TCP connections) to every
// gateway of a peer cluster and opens each stream on the least loaded live
// one: under loss one connection carries only so many small requests a
// second (PoolConfig.SessionsPerAddr).
//
// Opening a stream never waits for the peer: the opener's header leaves in
// the same flush as its first data, so a new connection costs no WAN round
// trip. Flow-control windows start small and grow toward the path's
// bandwidth-delay product, so one stream can fill a long fat link.
package tunnel

import (
	"context"
	"errors"
	"io"
	"net"
	"time"
)

// Stream is one bidirectional byte stream inside a Session, with the
// semantics of a TCP connection.
//
// Contract:
//   - Read and Write may be called concurrently with each other, and any
//     method may be called concurrently with Read and Write. Concurrent Writes
//     on one stream are serialized but their order is unspecified.
//   - Write returns once the data is handed to the session (not when the peer
//     has read it). It blocks while the peer's flow-control window is full.
//     Write never returns 0, nil for a non-empty p.
//   - Read returns io.EOF after the peer's CloseWrite (or Close), once all data
//     sent before it was read.
//   - CloseWrite sends EOF to the peer after the data written so far; Read
//     keeps working. Close is CloseWrite plus giving up reading: data that
//     arrives (or is still unread) after Close makes the stream reset, as in
//     TCP. Close and CloseWrite are idempotent.
//   - Reset aborts both directions at once. The peer's pending and future Read
//     and Write calls fail with a *ResetError carrying reason; data still
//     buffered at the peer before the reset arrived is delivered first. A
//     receiver refuses a stream by calling Reset on it without reading.
//   - When the Session ends, every Read and Write fails with an error that
//     wraps the session's Err.
//   - Deadlines behave as on net.Conn: a blocked or future call fails with an
//     error wrapping os.ErrDeadlineExceeded; a zero time clears the deadline.
//     The write deadline bounds only the wait for flow-control credit.
type Stream interface {
	io.ReadWriteCloser
	CloseWrite() error
	Reset(reason string) error
	// Header returns the opaque header the opener passed to OpenStream. The
	// caller must not modify it.
	Header() []byte
	SetDeadline(t time.Time) error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}

// Session is one authenticated connection to a peer gateway carrying many
// streams.
//
// Contract:
//   - OpenStream never waits for the peer. It fails only when the session is
//     closed, the header is too large, ctx is done, or the peer went away;
//     the peer refusing the stream shows up later on Read/Write as a
//     *ResetError.
//   - AcceptStream returns streams in the order the peer opened them and
//     fails (wrapping Err) once the session has ended.
//   - Peer is the identity the transport's PeerIdentity hook derived from the
//     peer's certificate; it never changes.
//   - RTT is the smoothed round-trip time from keepalive pings (0 until the
//     first pong).
//   - Done is closed when the session has ended for any reason (Close, the
//     peer closing, a keepalive timeout, a protocol error). Err then tells
//     why; it is nil before.
//   - Close ends the session and all its streams, returns after the
//     session's goroutines exited, and is idempotent.
type Session interface {
	OpenStream(ctx context.Context, header []byte) (Stream, error)
	AcceptStream(ctx context.Context) (Stream, error)
	Peer() string
	RTT() time.Duration
	Stats() Stats
	Close() error
	Done() <-chan struct{}
	Err() error
}

// Listener accepts Sessions from peer gateways.
//
// Contract: Accept returns authenticated sessions only (a failed handshake is
// not returned, it is counted and dropped); it fails after Close or when ctx
// is done. Close stops accepting and is idempotent; sessions already accepted
// stay open.
type Listener interface {
	Accept(ctx context.Context) (Session, error)
	Addr() net.Addr
	Close() error
}

// Transport creates Sessions. Dial returns once the handshake completed and
// the peer's identity is known.
type Transport interface {
	Dial(ctx context.Context, addr string) (Session, error)
	Listen(addr string) (Listener, error)
}

// Stats are counters of one session, cumulative since it started.
type Stats struct {
	StreamsOpened   uint64 // by us
	StreamsAccepted uint64 // handed to AcceptStream
	StreamsRefused  uint64 // incoming streams the session refused (backlog or limit)
	ResetsSent      uint64
	ResetsReceived  uint64
	BytesSent       uint64 // stream payload
	BytesReceived   uint64 // stream payload
	FramesSent      uint64
	FramesReceived  uint64
	PingsSent       uint64
	PongsReceived   uint64
	RTT             time.Duration
	// StreamWindow is the largest receive window a stream reached by
	// auto-tuning; new streams of the session start with it.
	StreamWindow uint64
	// Congestion is the TCP congestion control the socket uses ("" when
	// unknown, "quic" for QUIC).
	Congestion string
}

// ResetError is the error Read and Write return on a stream that was reset.
type ResetError struct {
	Reason string
	Remote bool // the peer reset (or refused) the stream
}

func (e *ResetError) Error() string {
	if e.Remote {
		return "stream reset by peer: " + e.Reason
	}
	return "stream reset: " + e.Reason
}

var (
	// ErrSessionClosed is wrapped by errors of a session closed locally.
	ErrSessionClosed = errors.New("session closed")
	// ErrPeerUnresponsive is wrapped by the error of a session whose peer
	// sent nothing for the keepalive timeout.
	ErrPeerUnresponsive = errors.New("peer unresponsive")
	// ErrProtocol is wrapped by errors caused by a peer violating the wire
	// protocol; the session is closed.
	ErrProtocol = errors.New("protocol violation")
	// ErrHeaderTooLarge is returned by OpenStream for a header longer than
	// the configured maximum.
	ErrHeaderTooLarge = errors.New("stream header too large")
	// ErrGoingAway is returned by OpenStream after the peer announced it is
	// closing the session.
	ErrGoingAway = errors.New("peer is going away")
	// ErrClosedStream is returned by Write after CloseWrite or Close, and by
	// Read after Close.
	ErrClosedStream = errors.New("use of closed stream")
	// ErrNoSession is returned by Pool.OpenStream when no session to the peer
	// is live.
	ErrNoSession = errors.New("no live session")
)

package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
)

// ResponderConfig configures a Responder.
type ResponderConfig struct {
	// Addr is the UDP host:port to answer on. Required.
	Addr string
}

// Validate reports a missing or malformed address.
func (c *ResponderConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("health responder: addr %q: want host:port", c.Addr)
	}
	return nil
}

// Responder echoes valid probes. Its socket is opened by NewResponder, so a
// caller knows the address is taken before it reports itself ready.
type Responder struct {
	conn      *net.UDPConn
	closeOnce sync.Once
}

// NewResponder binds the address.
func NewResponder(cfg ResponderConfig) (*Responder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := net.ListenPacket("udp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("health responder: %w", err)
	}
	return &Responder{conn: c.(*net.UDPConn)}, nil
}

// Addr is where the responder listens.
func (r *Responder) Addr() net.Addr { return r.conn.LocalAddr() }

// Run answers probes until ctx is done or Close is called.
func (r *Responder) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { r.Close() })
	defer stop()
	buf := make([]byte, 64)
	for {
		n, from, err := r.conn.ReadFromUDPAddrPort(buf)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			continue // e.g. an ICMP error from a prober that went away
		}
		if _, err := Decode(buf[:n]); err != nil {
			continue
		}
		_, _ = r.conn.WriteToUDPAddrPort(buf[:n], from)
	}
}

// Close stops Run. Idempotent.
func (r *Responder) Close() error {
	r.closeOnce.Do(func() { r.conn.Close() })
	return nil
}

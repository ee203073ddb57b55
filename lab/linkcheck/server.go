package linkcheck

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// ServerConfig configures the measuring server that runs in the far
// namespace (`strait lab probe server`).
type ServerConfig struct {
	Listen netip.AddrPort // UDP probes and TCP requests share the port
	Ready  io.Writer      // if set, receives "ready\n" once both sockets listen
	Logger *slog.Logger
}

// request is the first line of every TCP connection to the server.
type request struct {
	Op      string  `json:"op"` // expect, tally, flood, sink, source
	Session uint64  `json:"session,omitempty"`
	Count   int     `json:"count,omitempty"`
	PPS     int     `json:"pps,omitempty"`
	Size    int     `json:"size,omitempty"`
	Port    int     `json:"port,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	Verify  bool    `json:"verify,omitempty"`
	CC      string  `json:"cc,omitempty"`
}

// reply is the server's answer line; fields depend on the operation.
type reply struct {
	Error        string `json:"error,omitempty"`
	Received     uint64 `json:"received,omitempty"`
	Duplicates   uint64 `json:"duplicates,omitempty"`
	RcvbufErrors uint64 `json:"rcvbuf_errors,omitempty"`
	Sent         uint64 `json:"sent,omitempty"`
	SendErrors   uint64 `json:"send_errors,omitempty"`
	Transfer
}

// Transfer is what the receiving end of a bulk TCP transfer saw.
type Transfer struct {
	Bytes        int64   `json:"bytes,omitempty"`
	Seconds      float64 `json:"seconds,omitempty"` // first to last byte
	SteadyBytes  int64   `json:"steady_bytes,omitempty"`
	SteadySecond float64 `json:"steady_seconds,omitempty"` // from 1 s after the first byte to the last
	SHA256       string  `json:"sha256,omitempty"`
}

type server struct {
	udp *net.UDPConn
	log *slog.Logger

	mu       sync.Mutex
	sessions map[uint64]*tally
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// tally counts the distinct sequence numbers of one flood.
type tally struct {
	seen                 []uint64 // bitmap
	received, duplicates uint64
}

func (t *tally) add(seq uint64) {
	if seq >= uint64(len(t.seen))*64 {
		return
	}
	w, bit := seq/64, uint64(1)<<(seq%64)
	if t.seen[w]&bit != 0 {
		t.duplicates++
		return
	}
	t.seen[w] |= bit
	t.received++
}

// Serve answers probes and requests until ctx is done, and returns after
// its goroutines have exited.
func Serve(ctx context.Context, cfg ServerConfig) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(cfg.Listen))
	if err != nil {
		return fmt.Errorf("listen udp %s: %w", cfg.Listen, err)
	}
	_ = udp.SetReadBuffer(4 << 20)
	_ = udp.SetWriteBuffer(4 << 20)
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(cfg.Listen))
	if err != nil {
		udp.Close()
		return fmt.Errorf("listen tcp %s: %w", cfg.Listen, err)
	}
	s := &server{udp: udp, log: log, sessions: map[uint64]*tally{}, conns: map[net.Conn]struct{}{}}
	s.wg.Go(s.udpLoop)
	s.wg.Go(func() { s.acceptLoop(ln) })
	if cfg.Ready != nil {
		fmt.Fprintln(cfg.Ready, "ready")
	}
	<-ctx.Done()
	ln.Close()
	udp.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *server) udpLoop() {
	buf := make([]byte, 65536)
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		now := monoNow()
		p, err := decodeProbe(buf[:n])
		if err != nil {
			continue
		}
		switch p.kind {
		case kindEcho:
			p.kind, p.t2, p.t3 = kindReply, now, monoNow()
			_, _ = s.udp.WriteToUDPAddrPort(p.encode(buf[:probeHeaderLen]), from)
		case kindFlood:
			s.mu.Lock()
			if t := s.sessions[p.session]; t != nil {
				t.add(p.seq)
			}
			s.mu.Unlock()
		}
	}
}

func (s *server) acceptLoop(ln *net.TCPListener) {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			if err := s.handle(c); err != nil {
				s.log.Debug("request", "from", c.RemoteAddr(), "err", err)
			}
		})
	}
}

func (s *server) handle(c *net.TCPConn) error {
	r := bufio.NewReader(c)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return err
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return writeReply(c, reply{Error: "bad request: " + err.Error()})
	}
	if req.CC != "" {
		if err := setCongestion(c, req.CC); err != nil {
			return writeReply(c, reply{Error: err.Error()})
		}
	}
	switch req.Op {
	case "expect":
		if req.Count <= 0 || req.Count > 1<<26 {
			return writeReply(c, reply{Error: "count: must be between 1 and 67108864"})
		}
		s.mu.Lock()
		s.sessions[req.Session] = &tally{seen: make([]uint64, (req.Count+63)/64)}
		s.mu.Unlock()
		return writeReply(c, reply{RcvbufErrors: udpRcvbufErrors()})
	case "tally":
		s.mu.Lock()
		t := s.sessions[req.Session]
		delete(s.sessions, req.Session)
		s.mu.Unlock()
		if t == nil {
			return writeReply(c, reply{Error: fmt.Sprintf("session %d: not expected", req.Session)})
		}
		return writeReply(c, reply{Received: t.received, Duplicates: t.duplicates, RcvbufErrors: udpRcvbufErrors()})
	case "flood":
		ra, ok := netip.AddrFromSlice(c.RemoteAddr().(*net.TCPAddr).IP)
		if !ok || req.Port <= 0 || req.Port > 65535 {
			return writeReply(c, reply{Error: "flood: bad port"})
		}
		to := netip.AddrPortFrom(ra.Unmap(), uint16(req.Port))
		sent, errs, err := flood(s.closedCtx(r), req, func(b []byte) error {
			_, err := s.udp.WriteToUDPAddrPort(b, to)
			return err
		})
		if err != nil {
			return err
		}
		return writeReply(c, reply{Sent: sent, SendErrors: errs})
	case "sink":
		t, err := receive(r, req.Verify)
		if err != nil {
			return err
		}
		return writeReply(c, reply{Transfer: t})
	case "source":
		return source(c, time.Duration(req.Seconds*float64(time.Second)))
	}
	return writeReply(c, reply{Error: fmt.Sprintf("op %q: want expect, tally, flood, sink or source", req.Op)})
}

// closedCtx is done when the peer closes the connection, so a flood stops
// when the client goes away.
func (s *server) closedCtx(r *bufio.Reader) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	s.wg.Go(func() {
		_, _ = r.ReadByte()
		cancel()
	})
	return ctx
}

func writeReply(w io.Writer, r reply) error {
	b, _ := json.Marshal(r)
	_, err := w.Write(append(b, '\n'))
	return err
}

// flood sends req.Count flood datagrams of req.Size bytes at req.PPS,
// paced by elapsed time so late wakeups are made up, not lost.
func flood(ctx context.Context, req request, send func([]byte) error) (sent, errs uint64, err error) {
	buf := make([]byte, max(req.Size, probeHeaderLen))
	start := time.Now()
	for seq := 0; seq < req.Count; {
		due := min(req.Count, int(time.Since(start).Seconds()*float64(req.PPS))+1)
		for ; seq < due; seq++ {
			p := probe{kind: kindFlood, session: req.Session, seq: uint64(seq), t1: monoNow()}
			if send(p.encode(buf)) != nil {
				errs++
			} else {
				sent++
			}
		}
		if ctx.Err() != nil {
			return sent, errs, ctx.Err()
		}
		time.Sleep(200 * time.Microsecond)
	}
	return sent, errs, nil
}

// receive reads a bulk transfer to EOF.
func receive(r io.Reader, verify bool) (Transfer, error) {
	var h hash.Hash
	if verify {
		h = sha256.New()
	}
	buf := make([]byte, 256<<10)
	var t Transfer
	var first, steadyAt, last time.Time
	for {
		n, err := r.Read(buf)
		if n > 0 {
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			if steadyAt.IsZero() && now.Sub(first) >= time.Second {
				steadyAt = now
				t.SteadyBytes = -int64(n)
			}
			t.Bytes += int64(n)
			if !steadyAt.IsZero() {
				t.SteadyBytes += int64(n)
			}
			last = now
			if h != nil {
				h.Write(buf[:n])
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return t, err
		}
	}
	t.Seconds = last.Sub(first).Seconds()
	if !steadyAt.IsZero() {
		t.SteadySecond = last.Sub(steadyAt).Seconds()
	} else {
		t.SteadyBytes = 0
	}
	if h != nil {
		t.SHA256 = hex.EncodeToString(h.Sum(nil))
	}
	return t, nil
}

// source writes incompressible bytes for d, then closes its side.
func source(c *net.TCPConn, d time.Duration) error {
	setSendBuffer(c)
	buf := make([]byte, 256<<10)
	fillPattern(buf, 1)
	deadline := time.Now().Add(d)
	_ = c.SetWriteDeadline(deadline)
	for time.Now().Before(deadline) {
		if _, err := c.Write(buf); err != nil {
			if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
				return err
			}
			break
		}
	}
	return c.CloseWrite()
}

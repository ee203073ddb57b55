package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/strait-net/strait/internal/rawsock"
)

// client is one thread's HTTP/1.1 connection and the code that times a
// request on it.
//
// It is our own minimal client rather than net/http.Client with httptrace,
// because a measuring client must not hide costs or add its own:
//   - Connections are explicit: a thread owns at most one, so "connect = 0"
//     means this very request reused it, and net/http's pool, its silent
//     retries and its background dials cannot blur that.
//   - The request line, headers and body leave in one writev (net.Buffers)
//     straight from the payload buffer; net/http copies bodies through a
//     4 KiB bufio.Writer and separate write calls.
//   - Time to first byte is taken where the first response byte is read
//     from the socket, in the same goroutine; net/http reads in a
//     background goroutine and hands over through channels, which adds
//     scheduling jitter between the socket and the clock.
//
// The response is parsed by net/http's ReadResponse, so framing (length,
// chunked, close-delimited) follows the standard library. TCP_NODELAY is on
// (Go's default, set again explicitly): a client with Nagle on would hold a
// small tail segment until the server's delayed ACK.
type client struct {
	addr      string // host:port to dial
	req       *http.Request
	hdr       []byte // request line and headers, the same for every request
	keepAlive bool
	verify    bool
	timeout   time.Duration
	dialer    net.Dialer

	conn    *meterConn
	br      *bufio.Reader
	stop    func() bool // unregisters the context hook of conn
	scratch []byte
}

func newClient(cfg SeqConfig) (*client, error) {
	u, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	c := &client{
		addr:      net.JoinHostPort(u.Hostname(), port),
		req:       &http.Request{Method: cfg.method()},
		keepAlive: !cfg.DisableKeepAlive,
		verify:    cfg.VerifyEcho,
		timeout:   cfg.responseTimeout(),
		dialer:    net.Dialer{Timeout: cfg.connectTimeout()},
		scratch:   make([]byte, 64<<10),
	}
	var b strings.Builder
	b.WriteString(cfg.method() + " " + u.RequestURI() + " HTTP/1.1\r\n")
	b.WriteString("Host: " + u.Host + "\r\n")
	b.WriteString("User-Agent: strait-load\r\n")
	if cfg.Payload > 0 || bodyMethod(cfg.method()) {
		b.WriteString("Content-Type: application/octet-stream\r\n")
		b.WriteString("Content-Length: " + strconv.Itoa(cfg.Payload) + "\r\n")
	}
	if !c.keepAlive {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	c.hdr = []byte(b.String())
	return c, nil
}

func bodyMethod(m string) bool { return m == "POST" || m == "PUT" || m == "PATCH" }

// meterConn counts the bytes read and notes when the first one arrived.
type meterConn struct {
	*rawsock.TCPConn
	n     int64
	first time.Time
}

func (m *meterConn) Read(p []byte) (int, error) {
	n, err := m.TCPConn.Read(p)
	if n > 0 {
		if m.n == 0 {
			m.first = time.Now()
		}
		m.n += int64(n)
	}
	return n, err
}

func (c *client) close() {
	if c.conn == nil {
		return
	}
	c.stop()
	_ = c.conn.Close()
	c.conn, c.br, c.stop = nil, nil, nil
}

// do sends one request with body and fills s's timing, status, byte counts
// and error. Any failure closes the connection, so the next request
// connects anew.
func (c *client) do(ctx context.Context, body []byte, s *Sample) {
	start := time.Now()
	s.Start = time.UnixMicro(start.UnixMicro()).UTC()
	reused := c.conn != nil
	err := c.exchange(ctx, start, body, s)
	if err != nil && reused && s.Status == 0 && c.lastRead() == 0 && ctx.Err() == nil && !isTimeout(err) {
		// The server closed the idle keep-alive connection before it saw
		// our request (idle timeout, restart). Browsers, JMeter's
		// HttpClient and net/http all retry that once on a new connection;
		// so do we, and the sample carries the cost: the new connect time,
		// and the total from the first attempt.
		c.close()
		*s = Sample{Thread: s.Thread, Seq: s.Seq, Start: s.Start}
		err = c.exchange(ctx, start, body, s)
	}
	if err != nil {
		c.close()
		s.Err = err.Error()
	}
	s.Connect = s.Connect.Truncate(time.Microsecond)
	s.TTFB = s.TTFB.Truncate(time.Microsecond)
	s.Total = s.Total.Truncate(time.Microsecond)
}

func (c *client) lastRead() int64 {
	if c.conn == nil {
		return 0
	}
	return c.conn.n
}

func (c *client) exchange(ctx context.Context, start time.Time, body []byte, s *Sample) error {
	if c.conn == nil {
		t0 := time.Now()
		nc, err := c.dialer.DialContext(ctx, "tcp", c.addr)
		s.Connect = time.Since(t0)
		if err != nil {
			s.Total = time.Since(start)
			if isTimeout(err) {
				return fmt.Errorf("connect %s: timeout after %v", c.addr, c.dialer.Timeout)
			}
			return fmt.Errorf("connect %s: %w", c.addr, err)
		}
		tc := nc.(*net.TCPConn)
		_ = tc.SetNoDelay(true)
		rc, err := rawsock.NewTCPConn(tc)
		if err != nil {
			_ = tc.Close()
			s.Total = time.Since(start)
			return fmt.Errorf("connect %s: %w", c.addr, err)
		}
		c.conn = &meterConn{TCPConn: rc}
		c.br = bufio.NewReaderSize(c.conn, 64<<10)
		// Cancelling ctx unblocks a request in flight.
		c.stop = context.AfterFunc(ctx, func() { _ = tc.SetDeadline(time.Unix(1, 0)) })
	} else if c.br.Buffered() > 0 {
		return fmt.Errorf("server sent %d unexpected bytes on the idle connection", c.br.Buffered())
	}
	conn := c.conn
	conn.n, conn.first = 0, time.Time{}
	if c.timeout > 0 {
		_ = conn.SetDeadline(time.Now().Add(c.timeout))
	}
	n, err := conn.WriteBuffers(c.hdr, body)
	s.BytesSent = n
	if err != nil {
		werr := c.ioErr("write request", err)
		if !isTimeout(err) {
			// A server may answer before reading the whole body (413)
			// and close; its answer is worth more than "broken pipe".
			if resp, rerr := http.ReadResponse(c.br, c.req); rerr == nil {
				s.Status = resp.StatusCode
				s.TTFB = conn.first.Sub(start)
				werr = fmt.Errorf("%w (after %d of %d bytes; the server answered %q)", werr, n, int64(len(c.hdr)+len(body)), resp.Status)
			}
		}
		s.Total = time.Since(start)
		s.BytesReceived = conn.n
		return werr
	}
	resp, err := http.ReadResponse(c.br, c.req)
	if conn.n > 0 {
		s.TTFB = conn.first.Sub(start)
	}
	if err != nil {
		s.Total = time.Since(start)
		s.BytesReceived = conn.n
		return c.ioErr("read response", err)
	}
	s.Status = resp.StatusCode
	got, mismatch, err := c.readBody(resp.Body, body)
	s.Total = time.Since(start)
	// What the reader took from the socket is exactly this response: the
	// server sends nothing unasked, and Buffered was 0 before the request.
	s.BytesReceived = conn.n - int64(c.br.Buffered())
	if err != nil {
		return c.ioErr(fmt.Sprintf("read body after %d bytes", got), err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if mismatch != "" {
		return errors.New(mismatch)
	}
	if !c.keepAlive || resp.Close {
		c.close()
	}
	return nil
}

// readBody reads the body to its end (so the connection can carry the
// next request) and, when verifying, compares it with sent as it goes,
// without a second buffer.
func (c *client) readBody(r io.Reader, sent []byte) (got int64, mismatch string, err error) {
	for {
		n, err := r.Read(c.scratch)
		if n > 0 && c.verify && mismatch == "" {
			p := c.scratch[:n]
			switch {
			case got+int64(n) > int64(len(sent)):
				mismatch = fmt.Sprintf("echo mismatch: body longer than the %d bytes sent", len(sent))
			case !bytes.Equal(p, sent[got:got+int64(n)]):
				i := 0
				for p[i] == sent[got+int64(i)] {
					i++
				}
				mismatch = fmt.Sprintf("echo mismatch: first differing byte at offset %d of %d", got+int64(i), len(sent))
			}
		}
		got += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return got, mismatch, err
		}
	}
	if c.verify && mismatch == "" && got != int64(len(sent)) {
		mismatch = fmt.Sprintf("echo mismatch: got %d bytes, sent %d", got, len(sent))
	}
	return got, mismatch, nil
}

func (c *client) ioErr(op string, err error) error {
	if isTimeout(err) && c.timeout > 0 {
		return fmt.Errorf("%s: response timeout after %v", op, c.timeout)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

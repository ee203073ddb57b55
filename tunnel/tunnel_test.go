package tunnel_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/tunneltest"
)

// newTLS returns a transport that dials as cluster a and listens as
// cluster b; mutate adjusts its Config.
func newTLS(t testing.TB, pki *tunneltest.PKI, mutate func(*tunnel.Config)) *tunnel.TLSTransport {
	t.Helper()
	if pki == nil {
		pki = tunneltest.NewPKI(t)
	}
	cfg := tunnel.Config{ClientTLS: pki.ClientTLS(t, "a"), ServerTLS: pki.ServerTLS(t, "b")}
	if mutate != nil {
		mutate(&cfg)
	}
	tr, err := tunnel.NewTLS(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestConformanceTLS(t *testing.T) {
	pki := tunneltest.NewPKI(t)
	tunneltest.Conformance(t, func(t *testing.T) (tunnel.Session, tunnel.Session) {
		return tunneltest.Pair(t, newTLS(t, pki, nil))
	})
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  tunnel.Config
		want string // substring of the error, "" for valid
	}{
		{"zero", tunnel.Config{}, ""},
		{"header too big", tunnel.Config{MaxHeaderSize: 70000}, "MaxHeaderSize"},
		{"tiny stream window", tunnel.Config{MaxStreamWindow: 1000}, "MaxStreamWindow"},
		{"session below stream", tunnel.Config{MaxStreamWindow: 8 << 20, MaxSessionWindow: 4 << 20}, "MaxSessionWindow"},
		{"timeout below interval", tunnel.Config{KeepaliveInterval: time.Second, KeepaliveTimeout: 500 * time.Millisecond}, "KeepaliveTimeout"},
		{"no client auth", tunnel.Config{ServerTLS: &tls.Config{}}, "ClientAuth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tc.want)
			}
		})
	}
}

func TestCongestionControlReported(t *testing.T) {
	c, s := tunneltest.Pair(t, newTLS(t, nil, nil))
	cc, sc := c.Stats().Congestion, s.Stats().Congestion
	t.Logf("congestion control: dialer %q, listener %q", cc, sc)
	if cc == "" || sc == "" {
		t.Fatal("congestion control not reported on a TCP socket")
	}
}

// TestOpenNeedsNoRoundTrip holds back everything the server sends to the
// client after the handshake: open, write and half-close must still
// complete, and the server must receive header, data and EOF.
func TestOpenNeedsNoRoundTrip(t *testing.T) {
	conns := make(chan *gateConn, 1)
	tr := newTLS(t, nil, func(c *tunnel.Config) {
		c.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			raw, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			g := newGateConn(raw)
			conns <- g
			return g, nil
		}
	})
	client, server := tunneltest.Pair(t, tr)
	gate := <-conns
	gate.Hold()
	defer gate.Open()
	// A read that was already past the gate finishes, and the session's
	// reader comes back to wait at it: from then on no frame arrives.
	waitFor(t, func() bool { return gate.parked.Load() > 0 })
	before := client.Stats().FramesReceived

	done := make(chan error, 1)
	go func() {
		st, err := client.OpenStream(context.Background(), []byte("export=db"))
		if err == nil {
			_, err = st.Write([]byte("SELECT 1"))
		}
		if err == nil {
			err = st.CloseWrite()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("open+write+close blocked while nothing from the peer could arrive")
	}
	st, err := server.AcceptStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(st)
	if err != nil || string(st.Header()) != "export=db" || string(got) != "SELECT 1" {
		t.Fatalf("server got header %q data %q err %v", st.Header(), got, err)
	}
	if after := client.Stats().FramesReceived; after != before {
		t.Fatalf("client received %d frames while the gate was shut", after-before)
	}
}

func TestDeadPeerDetectedByKeepalive(t *testing.T) {
	conns := make(chan *gateConn, 1)
	tr := newTLS(t, nil, func(c *tunnel.Config) {
		c.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			raw, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			g := newGateConn(raw)
			conns <- g
			return g, nil
		}
	})
	client, server := tunneltest.Pair(t, tr)
	gate := <-conns
	st, err := client.OpenStream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := st.Read(make([]byte, 1))
		readErr <- err
	}()
	// A keepalive round trip (every 250 ms) measures the RTT.
	waitFor(t, func() bool { return client.RTT() != 0 })
	start := time.Now()
	gate.blackhole.Store(true)
	// A keepalive timeout (1 s) passes; on a busy host a timer that fires
	// late defers its verdict, up to ten timeouts of silence, so the wait
	// is bounded generously, as a hang detector only.
	for _, s := range []tunnel.Session{client, server} {
		select {
		case <-s.Done():
		case <-time.After(patience):
			t.Fatalf("dead peer not detected within %v", patience)
		}
	}
	// The server may see the client hang up first; the client must blame
	// the silence.
	if !errors.Is(client.Err(), tunnel.ErrPeerUnresponsive) {
		t.Errorf("client Err() = %v, want ErrPeerUnresponsive", client.Err())
	}
	t.Logf("both sides detected the dead peer after %v (keepalive timeout 1s)", time.Since(start).Round(time.Millisecond))
	if err := <-readErr; err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("stream read after peer death = %v, want an error", err)
	}
}

// TestWindowGrowsTowardBDP sends for a while over a link with 20 ms RTT and
// checks that the receive window grew well past its 256 KiB start.
func TestWindowGrowsTowardBDP(t *testing.T) {
	if testing.Short() {
		t.Skip("transfers for ~1.5s")
	}
	const oneWay = 10 * time.Millisecond
	tr := newTLS(t, nil, func(c *tunnel.Config) {
		c.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			raw, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return newDelayConn(raw, oneWay), nil
		}
	})
	client, server := tunneltest.Pair(t, tr)
	st, err := client.OpenStream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int64
		err error
	}
	res := make(chan result, 1)
	go func() {
		peer, err := server.AcceptStream(context.Background())
		if err != nil {
			res <- result{0, err}
			return
		}
		n, err := io.Copy(io.Discard, peer)
		res <- result{n, err}
	}()
	buf := make([]byte, 256<<10)
	start := time.Now()
	for time.Since(start) < 1500*time.Millisecond {
		if _, err := st.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	st.CloseWrite()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	elapsed := time.Since(start)
	rate := float64(r.n) / elapsed.Seconds()
	rtt := client.RTT()
	win := server.Stats().StreamWindow
	t.Logf("sent %d MiB in %v (%.0f MB/s) at RTT %v; receiver stream window %d KiB; rate×RTT %d KiB",
		r.n>>20, elapsed.Round(time.Millisecond), rate/1e6, rtt.Round(time.Millisecond), win>>10, int64(rate*rtt.Seconds())>>10)
	if win < 4*256<<10 {
		t.Fatalf("stream window %d KiB did not grow (start 256 KiB)", win>>10)
	}
}

// rawMux dials the listener with TLS and the mux ALPN but speaks raw frames.
func rawMux(t *testing.T, pki *tunneltest.PKI, addr string) *tls.Conn {
	cfg := pki.ClientTLS(t, "evil")
	cfg.NextProtos = []string{"strait-mux/1"}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	b[0], b[1] = typ, flags
	binary.BigEndian.PutUint16(b[2:], uint16(len(payload)))
	binary.BigEndian.PutUint32(b[4:], stream)
	return append(b, payload...)
}

func TestMalformedFramesCloseOnlyThatSession(t *testing.T) {
	pki := tunneltest.NewPKI(t)
	tr := newTLS(t, pki, nil)
	ln, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := context.Background()

	// A healthy session that must survive everything below.
	good, err := tr.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	goodSrv, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer goodSrv.Close()
	go func() {
		for {
			st, err := goodSrv.AcceptStream(ctx)
			if err != nil {
				return
			}
			go func() { io.Copy(st, st); st.Close() }()
		}
	}()

	bigData := func() []byte {
		var b []byte
		b = append(b, frame(1, 0, 1, nil)...)
		for range 9 { // 9 × 32 KiB > the 256 KiB initial stream window
			b = append(b, frame(0, 0, 1, make([]byte, 32<<10))...)
		}
		return b
	}()
	for _, tc := range []struct {
		name  string
		input []byte
		want  string
	}{
		{"unknown type", frame(9, 0, 1, nil), "unknown frame type"},
		{"header too large", frame(1, 0, 1, make([]byte, 5000)), "exceeds the maximum"},
		{"data on unopened stream", frame(0, 0, 7, []byte("x")), "never opened"},
		{"open with server parity", frame(1, 0, 2, nil), "wrong parity"},
		{"ping wrong length", frame(4, 0, 0, []byte("abc")), "want 8"},
		{"unknown flag", frame(0, 0x80, 1, nil), "unknown flags"},
		{"open on stream 0", frame(1, 0, 0, nil), "needs a stream ID"},
		{"flow control violation", bigData, "flow control"},
		{"data after fin", append(append(frame(1, 0, 1, nil), frame(0, 1, 1, nil)...), frame(0, 0, 1, []byte("x"))...), "after FIN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rawMux(t, pki, ln.Addr().String())
			srv, err := ln.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			// The server may hang up before reading all of it.
			c.Write(tc.input)
			select {
			case <-srv.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("session not closed after a malformed frame")
			}
			if !errors.Is(srv.Err(), tunnel.ErrProtocol) || !strings.Contains(srv.Err().Error(), tc.want) {
				t.Fatalf("Err() = %v, want ErrProtocol mentioning %q", srv.Err(), tc.want)
			}
			// The peer learns why in a GOAWAY before the connection ends
			// (best effort: when the server hangs up on unread input, TCP's
			// reset may discard it, so only small inputs are checked).
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			rest, _ := io.ReadAll(c)
			if len(tc.input) < 1000 && !bytes.Contains(rest, []byte(tc.want)) {
				t.Errorf("peer did not receive a GOAWAY with the reason (got %d bytes)", len(rest))
			}
		})
	}

	// The healthy session still works.
	st, err := good.OpenStream(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte("still here"))
	st.CloseWrite()
	got, err := io.ReadAll(st)
	if err != nil || string(got) != "still here" {
		t.Fatalf("healthy session after malformed peers: %q, %v", got, err)
	}
}

func TestAcceptBacklogRefuses(t *testing.T) {
	tr := newTLS(t, nil, func(c *tunnel.Config) { c.AcceptBacklog = 2 })
	client, server := tunneltest.Pair(t, tr)
	var streams []tunnel.Stream
	for i := range 4 {
		st, err := client.OpenStream(context.Background(), fmt.Appendf(nil, "%d", i))
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	// Streams 3 and 4 find the backlog full and are refused.
	for _, st := range streams[2:] {
		st.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := st.Read(make([]byte, 1))
		var re *tunnel.ResetError
		if !errors.As(err, &re) || !strings.Contains(re.Reason, "backlog") {
			t.Fatalf("err = %v, want refusal for a full backlog", err)
		}
	}
	if n := server.Stats().StreamsRefused; n != 2 {
		t.Fatalf("StreamsRefused = %d, want 2", n)
	}
}

// gateway serves echo streams prefixed with its name, like a peer gateway.
type gateway struct {
	name string
	ln   tunnel.Listener
	mu   sync.Mutex
	sess []tunnel.Session
	dead bool // kill ran: sessions accepted from now on are closed at once
	wg   sync.WaitGroup
}

// startGateway starts a gateway on a port of its own until the test ends:
// one killed and started again on its address (startGatewayAt) finds the
// port free, where one that had asked for port 0 lost it to any other bind
// or outgoing connection meanwhile (testenv.FreeAddr).
func startGateway(t *testing.T, tr tunnel.Transport, name string) *gateway {
	return startGatewayAt(t, tr, name, testenv.FreeAddr(t))
}

func startGatewayAt(t *testing.T, tr tunnel.Transport, name, addr string) *gateway {
	ln, err := tr.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{name: name, ln: ln}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			s, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			g.mu.Lock()
			if g.dead {
				// Accepted while kill ran: kill has closed the sessions it
				// knew and waits for this goroutine.
				g.mu.Unlock()
				s.Close()
				return
			}
			g.sess = append(g.sess, s)
			g.mu.Unlock()
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				for {
					st, err := s.AcceptStream(context.Background())
					if err != nil {
						return
					}
					go func() {
						st.Write([]byte(name + ":"))
						io.Copy(st, st)
						st.Close()
					}()
				}
			}()
		}
	}()
	t.Cleanup(g.kill)
	return g
}

// kill ends the gateway and all its sessions.
func (g *gateway) kill() {
	g.ln.Close()
	g.mu.Lock()
	g.dead = true
	for _, s := range g.sess {
		s.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

func TestPoolFailover(t *testing.T) {
	tr := newTLS(t, nil, nil)
	a, b := startGateway(t, tr, "A"), startGateway(t, tr, "B")
	pool := startPool(t, tunnel.PoolConfig{
		Transport: tr, Peer: "cluster-b",
		Addrs:      []string{a.ln.Addr().String(), b.ln.Addr().String()},
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
	})
	// Live sessions (Live) come before the table routes to them.
	waitFor(t, routed(pool, 2))

	which := func(key uint64) (string, tunnel.Stream) {
		t.Helper()
		st, err := pool.OpenStream(context.Background(), key, nil)
		if err != nil {
			t.Fatal(err)
		}
		prefix := make([]byte, 2)
		st.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(st, prefix); err != nil {
			t.Fatal(err)
		}
		st.SetReadDeadline(time.Time{})
		return string(prefix[:1]), st
	}
	// Flows spread over both gateways, and a key sticks to its gateway.
	seen := map[string][]uint64{}
	var onA []tunnel.Stream
	for key := range uint64(16) {
		g, st := which(key)
		seen[g] = append(seen[g], key)
		if g == "A" {
			onA = append(onA, st)
		} else {
			st.Close()
		}
	}
	if len(seen["A"]) == 0 || len(seen["B"]) == 0 {
		t.Fatalf("flows did not spread over both gateways: %v", seen)
	}
	if g, st := which(seen["B"][0]); g != "B" {
		t.Fatalf("key %d moved from B to %s while B lives", seen["B"][0], g)
	} else {
		st.Close()
	}

	a.kill()
	// A's streams end with an error, not a hang.
	for _, st := range onA {
		st.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := st.Read(make([]byte, 1)); err == nil || errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stream on the dead gateway: read err = %v, want the session's error", err)
		}
	}
	// A's flows move to B once the pool has seen every one of A's
	// sessions end: the streams above ended on some of them, and a stream
	// opened meanwhile on another that has not yet read its FIN fails on
	// its first read, as it would for any client of a gateway that just
	// died.
	waitFor(t, routed(pool, 1))
	for _, key := range seen["A"] {
		if g, st := which(key); g != "B" {
			t.Fatalf("key %d went to %s after A died", key, g)
		} else {
			st.Close()
		}
	}

	b.kill()
	waitFor(t, func() bool { return len(pool.Live()) == 0 })
	start := time.Now()
	_, err := pool.OpenStream(context.Background(), 1, nil)
	if !errors.Is(err, tunnel.ErrNoSession) {
		t.Fatalf("OpenStream with every gateway dead: %v, want ErrNoSession", err)
	}
	t.Logf("with no live gateway OpenStream failed after %v: %v", time.Since(start), err)
}

// startPool runs a pool with cfg (logging nowhere) until the test ends,
// and fails the test if Run does.
func startPool(t *testing.T, cfg tunnel.PoolConfig) *tunnel.Pool {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	pool, err := tunnel.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- pool.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("pool run: %v", err)
		}
	})
	return pool
}

// routed reports whether the pool's table routes flows to exactly n
// gateways, every one of them live, and to no other: the state a test may
// compare placements in. A gateway's health flag changes a moment before
// the table does.
func routed(pool *tunnel.Pool, n int) func() bool {
	return func() bool {
		c := 0
		for _, g := range pool.Gateways() {
			switch {
			case g.Live && g.Buckets > 0:
				c++
			case g.Live != (g.Buckets > 0):
				return false
			}
		}
		return c == n
	}
}

// patience bounds a wait for something that happens in milliseconds on a
// quiet host: a hang detector, not a speed requirement.
const patience = 30 * time.Second

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", patience)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWriteToForwardsEverything reads a stream with WriteTo (the gateway's
// path to a TCP connection) into a real TCP connection: every byte arrives
// in order, FIN ends it without an error, and a reset is an error.
func TestWriteToForwardsEverything(t *testing.T) {
	client, server := tunneltest.Pair(t, newTLS(t, nil, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		got <- b
	}()
	msg := make([]byte, 3<<20+17)
	for i := range msg {
		msg[i] = byte(i * 7 / 5)
	}
	st, err := client.OpenStream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// Writes of many sizes, so frames of all sizes and small records
		// arrive, some appended to a buffer, some in their own.
		p := msg
		for k := 1; len(p) > 0; k = (k*3 + 1) % 1000003 {
			n := min(len(p), k%(200<<10)+1)
			if _, err := st.Write(p[:n]); err != nil {
				return
			}
			p = p[n:]
		}
		_ = st.CloseWrite()
	}()
	peer, err := server.AcceptStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	n, err := peer.(io.WriterTo).WriteTo(c)
	c.Close()
	if err != nil || n != int64(len(msg)) {
		t.Fatalf("WriteTo = %d, %v; want %d, nil", n, err, len(msg))
	}
	if b := <-got; !bytes.Equal(b, msg) {
		t.Fatalf("the connection received %d bytes that differ from the %d sent", len(b), len(msg))
	}

	st2, err := client.OpenStream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st2.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	peer2, err := server.AcceptStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = st2.Reset("gone")
	}()
	var sink bytes.Buffer
	n, err = peer2.(io.WriterTo).WriteTo(&sink)
	var rst *tunnel.ResetError
	if !errors.As(err, &rst) || n != 7 || sink.String() != "partial" {
		t.Fatalf("WriteTo of a reset stream = %d (%q), %v; want 7 bytes and a *ResetError", n, sink.String(), err)
	}
}

// TestWriteToSmallFramesUnderBackpressure forwards small writes with
// WriteTo into a TCP connection whose reader first stalls, so the socket
// fills while the session's reader writes small frames to it itself
// (partial writes, a full socket, the rest left to WriteTo), and then
// echoes request by request, the keep-alive pattern the direct writes are
// for. Every byte must arrive once and in order, WriteTo must count them
// all, and the keep-alive requests must have gone the direct way.
func TestWriteToSmallFramesUnderBackpressure(t *testing.T) {
	client, server := tunneltest.Pair(t, newTLS(t, nil, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc := c.(*net.TCPConn)
	defer tc.Close()
	r := <-accepted
	if r == nil {
		t.Fatal("accept failed")
	}
	defer r.Close()
	// Small buffers, so that the stalled reader fills them quickly.
	_ = tc.SetWriteBuffer(4 << 10)
	_ = r.(*net.TCPConn).SetReadBuffer(4 << 10)

	st, err := client.OpenStream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
	peer, err := server.AcceptStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int64
		err error
	}
	forwarded := make(chan result, 1)
	go func() {
		n, err := peer.(io.WriterTo).WriteTo(tc)
		_ = tc.CloseWrite()
		forwarded <- result{n, err}
	}()
	sent := []byte{0}
	seq := byte(1)
	write := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = seq
			seq = seq*13 + 7
		}
		if _, err := st.Write(p); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, p...)
		return p
	}
	// Stalled: 150 KiB in writes of 1–3000 bytes, within the stream's
	// window (256 KiB), so all of it leaves while nobody reads.
	for i := 0; len(sent) < 150<<10; i++ {
		write(i*37%3000 + 1)
	}
	got := make([]byte, len(sent))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent) {
		t.Fatalf("the %d bytes written while the reader stalled arrived changed", len(sent))
	}
	direct := tunnel.DirectWrites(server)
	// Keep-alive: a request, then its delivery, 300 times.
	for i := range 300 {
		p := write(i*53%2000 + 1)
		got := make([]byte, len(p))
		if _, err := io.ReadFull(r, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, p) {
			t.Fatalf("request %d arrived changed", i)
		}
	}
	if err := st.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after the last request: %d more bytes, %v; want EOF", len(rest), err)
	}
	res := <-forwarded
	if res.err != nil || res.n != int64(len(sent)) {
		t.Fatalf("WriteTo = %d, %v; want %d, nil", res.n, res.err, len(sent))
	}
	// Most requests find WriteTo waiting; a loaded host may let some in
	// while it still writes the previous one.
	if d := tunnel.DirectWrites(server) - direct; d < 100 {
		t.Errorf("%d of 300 keep-alive requests were written by the session's reader itself; want most", d)
	}
}

// TestKeepaliveProbesOnlyWhenNeeded runs an idle and a busy session side by
// side, so both see the same host load, and counts their pings: on the idle
// one only the dialer probes (and gets pongs, the pool's sign of life and
// the RTT samples); on the busy one the data is proof of life and the dialer
// sends (almost) no probes. The keepalive interval is the gateway's default
// probe interval.
func TestKeepaliveProbesOnlyWhenNeeded(t *testing.T) {
	pki := tunneltest.NewPKI(t)
	tr := newTLS(t, pki, func(c *tunnel.Config) { c.KeepaliveInterval = 10 * time.Millisecond })
	idleC, idleS := tunneltest.Pair(t, tr)
	busyC, busyS := tunneltest.Pair(t, tr)

	// The acceptor sends, the dialer reads: the dialer hears data all the
	// time, and the acceptor hears the dialer's window updates.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		st, err := busyC.OpenStream(ctx, nil)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, st)
	}()
	st, err := busyS.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		chunk := make([]byte, 1024)
		for ctx.Err() == nil {
			if _, err := st.Write(chunk); err != nil {
				return
			}
			// Pacing, not synchronization: a steady trickle of frames.
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { cancel(); st.Reset("done"); <-writerDone }()
	waitFor(t, func() bool { return busyC.Stats().BytesReceived > 64<<10 })

	idleC0, idleS0, busyC0 := idleC.Stats(), idleS.Stats(), busyC.Stats()
	const probes = 50
	waitFor(t, func() bool { return idleC.Stats().PingsSent-idleC0.PingsSent >= probes })
	idleC1, idleS1, busyC1 := idleC.Stats(), idleS.Stats(), busyC.Stats()

	idlePings := idleC1.PingsSent - idleC0.PingsSent
	if d := idleC1.PongsReceived - idleC0.PongsReceived; d < idlePings/2 {
		t.Errorf("idle dialer got %d pongs for %d pings: its probes go unanswered", d, idlePings)
	}
	if d := idleS1.PingsSent - idleS0.PingsSent; d > idlePings/4 {
		t.Errorf("idle acceptor sent %d pings while the dialer sent %d: only the dialer should probe", d, idlePings)
	}
	if d := busyC1.PingsSent - busyC0.PingsSent; d > idlePings/4 {
		t.Errorf("busy dialer sent %d pings while the idle one sent %d: data should stand in for probes", d, idlePings)
	}
	t.Logf("over %d idle probe intervals: idle acceptor %d pings, busy dialer %d pings, %d KiB received",
		idlePings, idleS1.PingsSent-idleS0.PingsSent, busyC1.PingsSent-busyC0.PingsSent, (busyC1.BytesReceived-busyC0.BytesReceived)>>10)
}

// TestPoolProbesQuietGatewayOnce: an idle pool with two sessions to a
// gateway pings it once per quiet stretch (Pool.quietFor) between them, not
// once per interval and session, and the gateway stays live on the pongs. An idle session outside
// any pool, beside it under the same load, counts the intervals.
func TestPoolProbesQuietGatewayOnce(t *testing.T) {
	const interval = 10 * time.Millisecond
	tr := newTLS(t, nil, func(c *tunnel.Config) { c.KeepaliveInterval = interval })
	gw := startGateway(t, tr, "A")
	pool := startPool(t, tunnel.PoolConfig{Transport: tr, Peer: "cluster-b", Addrs: []string{gw.ln.Addr().String()},
		SessionsPerAddr: 2, ProbeInterval: interval, ProbeMisses: 10})
	waitFor(t, routed(pool, 1))
	received := func() (n uint64, sessions int) {
		gw.mu.Lock()
		defer gw.mu.Unlock()
		for _, s := range gw.sess {
			n += s.Stats().FramesReceived
		}
		return n, len(gw.sess)
	}
	waitFor(t, func() bool { _, n := received(); return n == 2 })
	clock, _ := tunneltest.Pair(t, tr)

	got0, _ := received()
	ticks0 := clock.Stats().PingsSent
	const intervals = 100
	waitFor(t, func() bool { return clock.Stats().PingsSent-ticks0 >= intervals })
	got1, _ := received()
	ticks := clock.Stats().PingsSent - ticks0
	frames := got1 - got0
	// An idle gateway is pinged once its quiet stretch reaches the
	// silence window less the round trip and three intervals (here 70 ms:
	// seven intervals), on one session at a time: about one frame per
	// seven intervals, where two sessions pinging every interval each
	// would be fourteen times that. The pool's ticker keeps its schedule
	// while the clock's timer drifts late under load, hence the room.
	const quiet = 7
	if frames > ticks*7/4/quiet || frames < ticks/2/quiet {
		t.Errorf("the gateway received %d frames on the pool's 2 sessions in %d probe intervals, want about one per %d intervals", frames, ticks, quiet)
	}
	if !pool.Gateways()[0].Live {
		t.Error("the gateway is not live on the pool's probes")
	}
	t.Logf("%d frames in %d intervals", frames, ticks)
}

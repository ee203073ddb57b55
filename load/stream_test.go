package load

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strait-net/strait/apps"
)

func TestHandshakeRoundTrip(t *testing.T) {
	for _, h := range []Handshake{
		{Mode: ModeForward, Duration: 10 * time.Second},
		{Mode: ModeReverse, Duration: time.Millisecond, CC: "bbr"},
		{Mode: ModeRR, RequestSize: 64, ResponseSize: 64, Duration: time.Hour, CC: "cubic"},
		{Mode: ModeRR, RequestSize: 1, ResponseSize: MaxMessage, Duration: time.Second, CC: "abcdefghijklmno"},
	} {
		b, err := h.MarshalBinary()
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		got, err := DecodeHandshake(b)
		if err != nil || got != h {
			t.Errorf("round trip of %+v: %+v, %v", h, got, err)
		}
	}
}

func TestDecodeHandshakeRejects(t *testing.T) {
	good, _ := Handshake{Mode: ModeRR, RequestSize: 64, ResponseSize: 64, Duration: time.Second, CC: "bbr"}.MarshalBinary()
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "0 bytes, want 36"},
		{"short", good[:35], "35 bytes"},
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n012345678"), `magic "GET "`},
		{"version", with(func(b []byte) []byte { b[4] = 2; return b }), "version 2"},
		{"mode 0", with(func(b []byte) []byte { b[5] = 0; return b }), "mode 0"},
		{"mode 4", with(func(b []byte) []byte { b[5] = 4; return b }), "mode 4"},
		{"reserved", with(func(b []byte) []byte { b[7] = 1; return b }), "reserved"},
		{"rr size 0", with(func(b []byte) []byte { copy(b[8:12], []byte{0, 0, 0, 0}); return b }), "request size 0"},
		{"rr too large", with(func(b []byte) []byte { copy(b[12:16], []byte{0xff, 0, 0, 0}); return b }), "response size"},
		{"bulk with sizes", with(func(b []byte) []byte { b[5] = byte(ModeForward); return b }), "must be 0 in mode forward"},
		{"duration 0", with(func(b []byte) []byte { copy(b[16:20], []byte{0, 0, 0, 0}); return b }), "duration 0s"},
		{"duration long", with(func(b []byte) []byte { copy(b[16:20], []byte{0x7f, 0, 0, 0}); return b }), "duration"},
		{"cc after nul", with(func(b []byte) []byte { b[30] = 'x'; return b }), "after the NUL"},
		{"cc 16 bytes", with(func(b []byte) []byte { copy(b[20:], "abcdefghijklmnop"); return b }), "longer than 15"},
		{"cc charset", with(func(b []byte) []byte { b[21] = '/'; return b }), "only letters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeHandshake(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func FuzzDecodeHandshake(f *testing.F) {
	for _, h := range []Handshake{
		{Mode: ModeForward, Duration: time.Second},
		{Mode: ModeRR, RequestSize: 8192, ResponseSize: 64, Duration: time.Minute, CC: "bbr"},
	} {
		b, _ := h.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	// Edges: nothing, one byte short, the largest sizes and duration,
	// congestion control names of invalid UTF-8 and without NUL padding.
	rr, _ := Handshake{Mode: ModeRR, RequestSize: 1, ResponseSize: 1, Duration: time.Millisecond, CC: "bbr"}.MarshalBinary()
	f.Add([]byte{})
	f.Add(rr[:HandshakeLen-1])
	huge := bytes.Clone(rr)
	copy(huge[8:20], bytes.Repeat([]byte{0xff}, 12))
	f.Add(huge)
	bad := bytes.Clone(rr)
	copy(bad[20:], "\xff\xfe\xc3")
	f.Add(bad)
	full := bytes.Clone(rr)
	copy(full[20:], bytes.Repeat([]byte("c"), HandshakeLen-20))
	f.Add(full)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHandshake(b)
		if err != nil {
			return
		}
		// Whatever decodes is valid and encodes back to the same bytes:
		// there is one encoding per handshake.
		again, err := h.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", h, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, h, again)
		}
	})
}

func FuzzReadAck(f *testing.F) {
	f.Add(appendAck(nil, true, "bbr"))
	f.Add(appendAck(nil, false, "handshake: version 2, want 1"))
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n"))
	// Edges: nothing, a text shorter than its length byte says, invalid
	// UTF-8 in the text, an unknown status.
	f.Add([]byte{})
	ok := appendAck(nil, true, "bbr")
	f.Add(ok[:len(ok)-1])
	f.Add(append(appendAck(nil, true, "")[:5], 2, 0xff, 0xfe))
	unknown := bytes.Clone(ok)
	unknown[4] = 0xff
	f.Add(unknown)
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		cc, err := readAck(r)
		if err != nil {
			return
		}
		if read := len(b) - r.Len(); read != 6+len(cc) || !bytes.Equal(b[:read], appendAck(nil, true, cc)) {
			t.Fatalf("%q: accepted %q after reading %d bytes", b, cc, read)
		}
	})
}

// streamServer runs a StreamServer on a free loopback port and collects
// its sessions.
type streamServer struct {
	addr     string
	mu       sync.Mutex
	sessions []StreamSession
}

func (s *streamServer) all() []StreamSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]StreamSession(nil), s.sessions...)
}

func startStreamServer(t testing.TB) *streamServer {
	t.Helper()
	s := &streamServer{}
	srv, err := ListenStream(context.Background(), StreamServerConfig{
		Listen: "127.0.0.1:0", HandshakeTimeout: 2 * time.Second, Grace: 5 * time.Second,
		OnSession: func(ss StreamSession) {
			s.mu.Lock()
			s.sessions = append(s.sessions, ss)
			s.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.addr = srv.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server run: %v", err)
		}
	})
	return s
}

// waitSessions waits until the server has accounted for n connections:
// the client may finish reading the trailer before the server's goroutine
// reports.
func waitSessions(t *testing.T, s *streamServer, n int) []StreamSession {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got := s.all(); len(got) >= n {
			return got
		}
	}
	t.Fatalf("server saw %d sessions, want %d", len(s.all()), n)
	return nil
}

func TestStreamBulk(t *testing.T) {
	for _, reverse := range []bool{false, true} {
		name := map[bool]string{false: "forward", true: "reverse"}[reverse]
		t.Run(name, func(t *testing.T) {
			s := startStreamServer(t)
			r, err := RunStream(t.Context(), StreamConfig{Server: s.addr, Parallel: 2, Duration: 300 * time.Millisecond, Reverse: reverse})
			if err != nil {
				t.Fatal(err)
			}
			wantDir := map[bool]string{false: "client-to-server", true: "server-to-client"}[reverse]
			if r.Mode != "stream" || r.Direction != wantDir || len(r.Streams) != 2 {
				t.Fatalf("mode %q direction %q with %d streams", r.Mode, r.Direction, len(r.Streams))
			}
			var serverBytes int64
			for _, ss := range waitSessions(t, s, 2) {
				if ss.Err != nil {
					t.Errorf("server session: %v", ss.Err)
				}
				serverBytes += ss.Bytes
			}
			// Both ends count the same payload: the sender what it wrote, the
			// receiver what it read.
			if r.Bytes == 0 || r.Bytes != r.SentBytes || r.Bytes != serverBytes {
				t.Errorf("received %d, sent %d, server counted %d bytes", r.Bytes, r.SentBytes, serverBytes)
			}
			for i, st := range r.Streams {
				if st.Bytes == 0 || st.Gbps <= 0 || st.Seconds <= 0 {
					t.Errorf("stream %d: %+v", i+1, st)
				}
			}
			if r.CC == "" || r.Retransmits < 0 {
				t.Errorf("cc %q, retransmits %d: want both from the sender's TCP_INFO", r.CC, r.Retransmits)
			}
		})
	}
}

func TestStreamRR(t *testing.T) {
	for _, tt := range []struct{ size, parallel int }{{64, 2}, {8192, 1}} {
		s := startStreamServer(t)
		r, err := RunStream(t.Context(), StreamConfig{Server: s.addr, RR: tt.size, Parallel: tt.parallel, Duration: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var serverTx, serverBytes int64
		for _, ss := range waitSessions(t, s, tt.parallel) {
			if ss.Err != nil {
				t.Errorf("server session: %v", ss.Err)
			}
			serverTx += ss.Transactions
			serverBytes += ss.Bytes
		}
		if r.Transactions == 0 || r.Transactions != r.ServerTransactions || r.Transactions != serverTx ||
			serverBytes != r.Transactions*int64(tt.size) || r.Histogram().TotalCount() != r.Transactions {
			t.Errorf("rr %d×%d: client %d transactions, trailer %d, server %d (%d bytes), histogram %d",
				tt.size, tt.parallel, r.Transactions, r.ServerTransactions, serverTx, serverBytes, r.Histogram().TotalCount())
		}
		if r.Mode != "rr" || r.MessageSize != tt.size || r.Latency == nil || r.Latency.P50 <= 0 || r.TPS <= 0 {
			t.Errorf("result %+v", r)
		}
	}
}

func TestStreamBadHandshake(t *testing.T) {
	s := startStreamServer(t)
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	garbage := []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nxxxxxxxxx")
	if _, err := c.Write(garbage); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = readAck(c)
	if err == nil || !strings.Contains(err.Error(), "server rejected the test: handshake: magic \"GET \"") {
		t.Fatalf("ack error %v, want the server's rejection naming the magic", err)
	}
	if rest, _ := io.ReadAll(c); len(rest) != 0 {
		t.Errorf("%d bytes after a rejection", len(rest))
	}
	ss := waitSessions(t, s, 1)
	if ss[0].Err == nil || ss[0].Handshake != (Handshake{}) {
		t.Errorf("server session %+v: want the rejection", ss[0])
	}
}

func TestStreamClientErrors(t *testing.T) {
	s := startStreamServer(t)
	http := strings.TrimPrefix(strings.TrimSuffix(startApp(t, apps.Config{Kind: apps.Hello}), "/"), "http://")
	// A server of another protocol that speaks first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
			// Read the handshake before closing, so the close is a FIN
			// and not a reset that could overtake the banner.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.ReadFull(c, make([]byte, HandshakeLen))
			_ = c.Close()
		}
	}()
	ssh := ln.Addr().String()
	tests := []struct {
		name string
		cfg  StreamConfig
		want string
	}{
		{"silent server", StreamConfig{Server: http, Duration: time.Second, ConnectTimeout: 300 * time.Millisecond}, "no answer to the handshake within 300ms"},
		{"other protocol", StreamConfig{Server: ssh, Duration: time.Second}, `magic "SSH-", want "STRA" (not a strait stream server?)`},
		{"unknown cc", StreamConfig{Server: s.addr, Duration: time.Second, CC: "nosuchcc"}, `congestion control "nosuchcc"`},
		{"bad cc", StreamConfig{CC: "bbr/x"}, "cc: congestion control"},
		{"bad parallel", StreamConfig{Parallel: MaxParallel + 1}, "parallel 129"},
		{"bad rr", StreamConfig{RR: -1}, "rr -1"},
		{"bad duration", StreamConfig{Duration: 2 * time.Hour}, "duration 2h0m0s"},
		{"bad server", StreamConfig{Server: "localhost"}, `server "localhost"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := RunStream(t.Context(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestStreamServerMaxConns(t *testing.T) {
	srv, err := ListenStream(t.Context(), StreamServerConfig{Listen: "127.0.0.1:0", MaxConns: 1, HandshakeTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(t.Context()) }()
	// The first connection holds the only slot: it never sends its
	// handshake.
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		srv.mu.Lock()
		n := len(srv.conns)
		srv.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server holds %d connections, want the first one", n)
		}
	}
	_, err = RunStream(t.Context(), StreamConfig{Server: srv.Addr().String(), Duration: time.Second})
	if err == nil || !strings.Contains(err.Error(), "busy") {
		t.Errorf("error %v, want the server's refusal", err)
	}
	// Close ends the held connection too, and Run returns after it.
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("held connection still open after Close")
	}
}

func TestStreamCC(t *testing.T) {
	s := startStreamServer(t)
	for _, reverse := range []bool{false, true} {
		r, err := RunStream(t.Context(), StreamConfig{Server: s.addr, Duration: 50 * time.Millisecond, CC: "reno", Reverse: reverse})
		if err != nil {
			t.Fatal(err)
		}
		if r.CC != "reno" {
			t.Errorf("reverse=%v: sender cc %q, want reno", reverse, r.CC)
		}
	}
}

func TestStreamCancel(t *testing.T) {
	s := startStreamServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := RunStream(ctx, StreamConfig{Server: s.addr, Duration: time.Minute, Reverse: true})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want deadline exceeded", err)
	}
	if el := time.Since(start); el > 30*time.Second {
		t.Errorf("returned after %v", el)
	}
}

func TestStreamResultJSON(t *testing.T) {
	in := StreamResult{
		Server: "127.0.0.1:5201", Mode: "rr", Direction: "both", Parallel: 1, DurationSec: 10, ElapsedSec: 10.001,
		CC: "bbr", Bytes: 640, SentBytes: 640, Gbps: 0.001, Retransmits: 0,
		Streams:     []StreamStat{{Bytes: 640, SentBytes: 640, Seconds: 10.001, Transactions: 10, ServerTransactions: 10, TPS: 1}},
		MessageSize: 64, Transactions: 10, ServerTransactions: 10, TPS: 1,
		Latency: &Percentiles{Mean: 30, P50: 25, P100: 90},
	}
	var buf bytes.Buffer
	if err := in.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var out StreamResult
	if err := json.Unmarshal(buf.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if in.Latency == nil || *in.Latency != *out.Latency {
		t.Fatalf("latency changed: %+v", out.Latency)
	}
	in.Latency, out.Latency = nil, nil
	if a, b := mustJSON(t, in), mustJSON(t, out); a != b {
		t.Fatalf("round trip changed the result:\n%s\n%s", a, b)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func BenchmarkDecodeHandshake(b *testing.B) {
	hb, _ := Handshake{Mode: ModeRR, RequestSize: 64, ResponseSize: 64, Duration: time.Second, CC: "bbr"}.MarshalBinary()
	for b.Loop() {
		if _, err := DecodeHandshake(hb); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRR is one 64-byte transaction over loopback, server included:
// the floor under the rr latencies the lab reports.
func BenchmarkRR(b *testing.B) {
	s := startStreamServer(b)
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	hb, _ := Handshake{Mode: ModeRR, RequestSize: 64, ResponseSize: 64, Duration: time.Minute}.MarshalBinary()
	if _, err := c.Write(hb); err != nil {
		b.Fatal(err)
	}
	if _, err := readAck(c); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64)
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
}

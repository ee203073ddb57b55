package load

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/apps"
	"github.com/strait-net/strait/internal/testenv"
)

// startApp runs a real workload server on a free loopback port.
func startApp(t testing.TB, cfg apps.Config) string {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	srv, err := apps.Listen(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + srv.Addr().String() + "/"
}

// startHandler serves h on a free loopback port with Go's server.
func startHandler(t testing.TB, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return "http://" + ln.Addr().String() + "/"
}

func run(t *testing.T, cfg SeqConfig) []Sample {
	t.Helper()
	samples, err := RunSeq(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := max(cfg.Threads, 1) * max(cfg.Requests, 1)
	if len(samples) != want {
		t.Fatalf("%d samples, want %d", len(samples), want)
	}
	return samples
}

func TestValidate(t *testing.T) {
	tests := []struct {
		cfg  SeqConfig
		want string
	}{
		{SeqConfig{}, ""},
		{SeqConfig{URL: "http://[::1]:80/x?y", Payload: 10, Method: "PUT", Requests: 5, Threads: 2}, ""},
		{SeqConfig{URL: "https://example.com/"}, "scheme must be http"},
		{SeqConfig{URL: "http:///path"}, "no host"},
		{SeqConfig{URL: "http://u:p@host/"}, "user information"},
		{SeqConfig{URL: "http://host:80:80/"}, `url "http://host:80:80/"`},
		{SeqConfig{Method: "GE T"}, `method "GE T"`},
		{SeqConfig{Payload: -1}, "payload -1"},
		{SeqConfig{Payload: MaxPayload + 1}, "payload"},
		{SeqConfig{Requests: -1}, "requests -1"},
		{SeqConfig{Threads: -1}, "threads -1"},
		{SeqConfig{Warmup: -1}, "warmup -1"},
		{SeqConfig{ThinkTime: -1}, "think time"},
		{SeqConfig{ConnectTimeout: -1}, "connect timeout"},
		{SeqConfig{ResponseTimeout: -1}, "response timeout"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tt.cfg, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%+v: error %v, want one containing %q", tt.cfg, err, tt.want)
		}
	}
}

func TestKeepAliveConnectTime(t *testing.T) {
	url := startApp(t, apps.Config{Kind: apps.Echo})
	for _, keepAlive := range []bool{true, false} {
		samples := run(t, SeqConfig{URL: url, Payload: 1000, Requests: 10, DisableKeepAlive: !keepAlive, VerifyEcho: true})
		for _, s := range samples {
			if !s.OK() {
				t.Fatalf("keep-alive %v: %+v", keepAlive, s)
			}
			connected := s.Connect > 0
			if want := !keepAlive || s.Seq == 1; connected != want {
				t.Errorf("keep-alive %v, seq %d: connect %v", keepAlive, s.Seq, s.Connect)
			}
			if s.TTFB <= 0 || s.TTFB > s.Total || s.Connect > s.TTFB {
				t.Errorf("keep-alive %v, seq %d: connect %v, ttfb %v, total %v out of order", keepAlive, s.Seq, s.Connect, s.TTFB, s.Total)
			}
		}
	}
}

// TestConnectionsCounted checks reuse from the server's side: keep-alive
// makes one connection per thread, no keep-alive one per request.
func TestConnectionsCounted(t *testing.T) {
	var conns atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, apps.HelloBody) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	run(t, SeqConfig{URL: url, Requests: 5, Threads: 3, Warmup: 2})
	if got := conns.Swap(0); got != 3 {
		t.Errorf("keep-alive: %d connections, want 3", got)
	}
	run(t, SeqConfig{URL: url, Requests: 5, Threads: 3, DisableKeepAlive: true})
	if got := conns.Load(); got != 15 {
		t.Errorf("no keep-alive: %d connections, want 15", got)
	}
}

func TestWorkloads(t *testing.T) {
	tests := []struct {
		kind     apps.Kind
		cfg      SeqConfig
		bodySize int64 // response body bytes
	}{
		{apps.Echo, SeqConfig{Payload: 60, VerifyEcho: true}, 60},
		{apps.Echo, SeqConfig{Payload: 10_000_000, VerifyEcho: true}, 10_000_000},
		{apps.Echo, SeqConfig{Method: "PUT", Payload: 3, VerifyEcho: true}, 3},
		{apps.Echo, SeqConfig{VerifyEcho: true}, 0},
		{apps.Recv, SeqConfig{Payload: 100_000}, 0},
		{apps.Static, SeqConfig{}, 1000},
		{apps.Hello, SeqConfig{}, 13},
	}
	for _, tt := range tests {
		url := startApp(t, apps.Config{Kind: tt.kind})
		cfg := tt.cfg
		cfg.URL, cfg.Requests, cfg.Threads = url, 3, 2
		for _, s := range run(t, cfg) {
			if !s.OK() || s.Status != 200 {
				t.Errorf("%s %+v: %+v", tt.kind, tt.cfg, s)
				continue
			}
			if s.BytesSent < int64(cfg.Payload)+50 || s.BytesSent > int64(cfg.Payload)+200 {
				t.Errorf("%s: %d bytes sent for a %d-byte body", tt.kind, s.BytesSent, cfg.Payload)
			}
			if s.BytesReceived < tt.bodySize+50 || s.BytesReceived > tt.bodySize+250 {
				t.Errorf("%s: %d bytes received for a %d-byte body", tt.kind, s.BytesReceived, tt.bodySize)
			}
		}
	}
}

func TestSamplesOrderedAndNumbered(t *testing.T) {
	url := startApp(t, apps.Config{Kind: apps.Hello})
	var streamed atomic.Int64
	samples := run(t, SeqConfig{URL: url, Requests: 4, Threads: 3, ThinkTime: time.Millisecond,
		OnSample: func(Sample) { streamed.Add(1) }})
	i := 0
	for th := 1; th <= 3; th++ {
		var prev time.Time
		for seq := 1; seq <= 4; seq++ {
			s := samples[i]
			i++
			if s.Thread != th || s.Seq != seq {
				t.Fatalf("sample %d is thread %d seq %d, want %d %d", i, s.Thread, s.Seq, th, seq)
			}
			if seq > 1 && s.Start.Sub(prev) < time.Millisecond {
				t.Errorf("thread %d seq %d started %v after the previous one, think time is 1ms", th, seq, s.Start.Sub(prev))
			}
			prev = s.Start
		}
	}
	if streamed.Load() != 12 {
		t.Errorf("OnSample saw %d samples", streamed.Load())
	}
}

// corrupting echoes the body with one byte changed, or cut short, or a
// previous request's body: what a broken proxy might do.
func corrupting(mode string) http.Handler {
	var last []byte
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		out := bytes.Clone(b)
		switch mode {
		case "flip":
			out[len(out)/2] ^= 0x01
		case "short":
			out = out[:len(out)-1]
		case "long":
			out = append(out, 'x')
		case "stale":
			if last != nil {
				out = last
			}
			last = b
		}
		_, _ = w.Write(out)
	})
}

func TestVerifyEchoCatchesCorruption(t *testing.T) {
	tests := []struct {
		mode string
		want string
		good int // samples expected to pass
	}{
		{"flip", "echo mismatch: first differing byte at offset 500 of 1000", 0},
		{"short", "echo mismatch: got 999 bytes, sent 1000", 0},
		{"long", "echo mismatch: body longer than the 1000 bytes sent", 0},
		{"stale", "echo mismatch: first differing byte at offset 0 of 1000", 1},
	}
	for _, tt := range tests {
		url := startHandler(t, corrupting(tt.mode))
		samples := run(t, SeqConfig{URL: url, Payload: 1000, Requests: 3, VerifyEcho: true})
		good := 0
		for _, s := range samples {
			switch {
			case s.OK():
				good++
			case s.Err != tt.want:
				t.Errorf("%s: error %q, want %q", tt.mode, s.Err, tt.want)
			case s.Status != 200 || s.Total <= 0:
				t.Errorf("%s: error row without status or time: %+v", tt.mode, s)
			}
		}
		if good != tt.good {
			t.Errorf("%s: %d samples passed, want %d", tt.mode, good, tt.good)
		}
	}
	// Without verification the same bytes pass.
	url := startHandler(t, corrupting("flip"))
	for _, s := range run(t, SeqConfig{URL: url, Payload: 1000, Requests: 2}) {
		if !s.OK() {
			t.Errorf("without verify-echo: %+v", s)
		}
	}
}

func TestErrorRowsAndLoopGoesOn(t *testing.T) {
	// A server that accepts and never answers.
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
			defer c.Close()
		}
	}()
	start := time.Now()
	samples := run(t, SeqConfig{URL: "http://" + ln.Addr().String() + "/", Requests: 3, ResponseTimeout: 100 * time.Millisecond})
	for _, s := range samples {
		if s.Err != "read response: response timeout after 100ms" || s.Status != 0 || s.Connect <= 0 {
			t.Errorf("silent server: %+v", s)
		}
		if s.Total < 100*time.Millisecond {
			t.Errorf("silent server: total %v before the timeout", s.Total)
		}
	}
	// Without the configured timeout each request would wait for the
	// default one; how much sooner the run ends depends on the machine.
	if el := time.Since(start); el >= DefaultResponseTimeout {
		t.Errorf("three 100ms timeouts took %v, as long as the default timeout %v", el, DefaultResponseTimeout)
	}

	// Nothing listens: connection refused, every time. The port is held
	// (testenv.FreeAddr): one picked and closed may be listened on by
	// another program by the time the requests go out.
	dead := testenv.FreeAddr(t)
	for _, s := range run(t, SeqConfig{URL: "http://" + dead + "/", Requests: 2}) {
		if !strings.HasPrefix(s.Err, "connect "+dead+": ") || !strings.Contains(s.Err, "refused") {
			t.Errorf("refused: %+v", s)
		}
	}

	// Wrong status is an error; the next request still goes out on a
	// fresh connection.
	var n atomic.Int64
	url := startHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 2 {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	samples = run(t, SeqConfig{URL: url, Requests: 3})
	if samples[0].Err != "" || samples[1].Err != "status 500" || samples[1].Status != 500 || samples[2].Err != "" {
		t.Errorf("status: %+v", samples)
	}
	if samples[2].Connect == 0 {
		t.Errorf("request after a failure reused the connection: %+v", samples[2])
	}

	// A server that resets mid-body.
	url = startHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		c, _, _ := w.(http.Hijacker).Hijack()
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}))
	for _, s := range run(t, SeqConfig{URL: url, Requests: 2}) {
		if !strings.HasPrefix(s.Err, "read body after 7 bytes: ") || s.Status != 200 {
			t.Errorf("reset: %+v", s)
		}
	}
}

// TestStaleConnectionRetried: the server closes every connection right
// after its response, without saying so (as one does when its idle timeout
// fires), so every reused connection is dead; each request is retried once
// on a new connection and succeeds, paying the connect.
func TestStaleConnectionRetried(t *testing.T) {
	url := startHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		c.Close()
	}))
	for _, s := range run(t, SeqConfig{URL: url, Payload: 100, Requests: 4, VerifyEcho: true}) {
		if !s.OK() || s.Connect == 0 {
			t.Errorf("%+v", s)
		}
	}
	// The same with a real idle timeout.
	url = startApp(t, apps.Config{Kind: apps.Echo, IdleTimeout: 10 * time.Millisecond})
	for _, s := range run(t, SeqConfig{URL: url, Payload: 100, Requests: 2, ThinkTime: 200 * time.Millisecond, VerifyEcho: true}) {
		if !s.OK() {
			t.Errorf("%+v", s)
		}
	}
}

func TestWarmupNotRecorded(t *testing.T) {
	var n atomic.Int64
	url := startHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
	samples := run(t, SeqConfig{URL: url, Requests: 3, Warmup: 2})
	if n.Load() != 5 {
		t.Errorf("server saw %d requests, want 5", n.Load())
	}
	for _, s := range samples {
		if s.Connect != 0 {
			t.Errorf("seq %d connected after warm-up: %v", s.Seq, s.Connect)
		}
	}
}

func TestCancel(t *testing.T) {
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
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	samples, err := RunSeq(ctx, SeqConfig{URL: "http://" + ln.Addr().String() + "/", Requests: 5, Threads: 2})
	if err != context.DeadlineExceeded || len(samples) != 0 {
		t.Errorf("got %d samples, error %v", len(samples), err)
	}
	// The server never answers: without the cancel the run would wait for
	// the default response timeout.
	if el := time.Since(start); el >= DefaultResponseTimeout {
		t.Errorf("cancel took %v, as long as the default response timeout", el)
	}
}

func TestFillPayload(t *testing.T) {
	a, b := make([]byte, 1001), make([]byte, 1001)
	FillPayload(a, 1, 1)
	FillPayload(b, 1, 1)
	if !bytes.Equal(a, b) {
		t.Error("same thread and seq, different bytes")
	}
	for _, other := range [][2]int{{1, 2}, {2, 1}, {1, 0}} {
		FillPayload(b, other[0], other[1])
		if bytes.Equal(a[:8], b[:8]) || bytes.Equal(a[993:], b[993:]) {
			t.Errorf("thread %d seq %d repeats thread 1 seq 1", other[0], other[1])
		}
	}
	short := make([]byte, 5)
	FillPayload(short, 1, 1)
	if !bytes.Equal(short, a[:5]) {
		t.Error("a short payload is not a prefix of a long one")
	}
}

// TestConnectTimeout fills the accept queue of a listener that never
// accepts (backlog 0), so the kernel drops further SYNs and dialing hangs
// until the connect timeout.
func TestConnectTimeout(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue; stop at the first dial that does not complete.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		defer c.Close()
		if i == 10 {
			t.Skip("the kernel keeps accepting connections into a backlog-0 queue")
		}
	}
	for _, s := range run(t, SeqConfig{URL: "http://" + addr + "/", Requests: 2, ConnectTimeout: 100 * time.Millisecond}) {
		if s.Err != "connect "+addr+": timeout after 100ms" || s.Connect < 100*time.Millisecond || s.Status != 0 {
			t.Errorf("%+v", s)
		}
	}
}

// TestEarlyAnswer: the server refuses a body larger than its limit with
// 413 before reading it; the row keeps the status.
func TestEarlyAnswer(t *testing.T) {
	url := startApp(t, apps.Config{Kind: apps.Echo, MaxBody: 1000})
	for _, s := range run(t, SeqConfig{URL: url, Payload: 20 << 20, Requests: 2}) {
		if s.Status != 413 || s.Err == "" {
			t.Errorf("%+v", s)
		}
		t.Logf("%s", s.Err)
	}
}

// TestDuration: with Duration a thread goes on past Requests until the
// time is up, numbering its requests on; without it, it stops at Requests.
func TestDuration(t *testing.T) {
	url := startApp(t, apps.Config{Kind: apps.Echo})
	samples, err := RunSeq(t.Context(), SeqConfig{URL: url, Requests: 2, Duration: time.Second, Payload: 10, VerifyEcho: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) <= 2 {
		t.Fatalf("%d samples in a second of loopback echoes, want more than --requests (2)", len(samples))
	}
	first, last := samples[0], samples[len(samples)-1]
	if first.Seq != 1 || last.Seq != len(samples) {
		t.Errorf("seq %d..%d over %d samples", first.Seq, last.Seq, len(samples))
	}
	for _, s := range samples {
		if !s.OK() {
			t.Fatalf("seq %d: %s", s.Seq, s.Err)
		}
	}
	if err := (SeqConfig{Duration: -time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "duration") {
		t.Errorf("negative duration: %v", err)
	}
}

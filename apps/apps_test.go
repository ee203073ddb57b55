package apps

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
)

// start runs a server for cfg on a free loopback port and returns its base
// URL; the server stops, and Run must return, when the test ends.
func start(t *testing.T, cfg Config) string {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	srv, err := Listen(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
		if err := srv.Close(); err != nil {
			t.Errorf("Close after Run: %v", err)
		}
	})
	return "http://" + srv.Addr().String()
}

func TestValidate(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{Config{}, ""},
		{Config{Kind: Echo, Listen: "127.0.0.1:0"}, ""},
		{Config{Kind: Static, Listen: ":8080", StaticSize: 10}, ""},
		{Config{Kind: "payload-echo"}, `kind "payload-echo": must be one of echo, recv, static, hello`},
		{Config{Listen: "8080"}, `listen "8080": want host:port`},
		{Config{Listen: ":http"}, "port must be a number"},
		{Config{Listen: ":70000"}, "port must be a number"},
		{Config{MaxBody: -1}, "max body -1"},
		{Config{StaticSize: -1}, "static size -1"},
		{Config{IdleTimeout: -time.Second}, "idle timeout"},
		{Config{ShutdownTimeout: -time.Second}, "shutdown timeout"},
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

func TestKinds(t *testing.T) {
	type want struct {
		status int
		body   string
	}
	static := string(StaticBody(DefaultStaticSize))
	tests := []struct {
		kind          Kind
		method, path  string
		body          string
		want          want
		wantLenHeader string
	}{
		{Echo, "POST", "/", "ping", want{200, "ping"}, "4"},
		{Echo, "PUT", "/any/path?q=1", "x,y", want{200, "x,y"}, "3"},
		{Echo, "GET", "/", "", want{200, ""}, "0"},
		{Recv, "POST", "/upload", strings.Repeat("a", 5000), want{200, ""}, "0"},
		{Recv, "GET", "/", "", want{200, ""}, "0"},
		{Static, "GET", "/", "", want{200, static}, "1000"},
		{Static, "POST", "/x", "ignored body", want{200, static}, "1000"},
		{Static, "DELETE", "/x", "", want{200, static}, "1000"},
		{Hello, "GET", "/", "", want{200, "Hello, World!"}, "13"},
		{Hello, "POST", "/hello", "body", want{200, "Hello, World!"}, "13"},
		{Peer, "GET", "/", "", want{200, "127.0.0.1\n"}, "10"},
		{Peer, "POST", "/x", "ignored body", want{200, "127.0.0.1\n"}, "10"},
	}
	urls := map[Kind]string{}
	for _, k := range Kinds {
		urls[k] = start(t, Config{Kind: k})
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s_%s_%s", tt.kind, tt.method, strings.ReplaceAll(tt.path, "/", "_")), func(t *testing.T) {
			req, err := http.NewRequest(tt.method, urls[tt.kind]+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.want.status || string(body) != tt.want.body {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, trunc(body), tt.want.status, trunc([]byte(tt.want.body)))
			}
			if got := resp.Header.Get("Content-Length"); got != tt.wantLenHeader {
				t.Errorf("Content-Length %q, want %q", got, tt.wantLenHeader)
			}
		})
	}
	if len(static) != 1000 {
		t.Errorf("static body is %d bytes, want 1000", len(static))
	}
}

func trunc(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

var echoSizes = []int{60, 1000, 100_000, 1_000_000, 10_000_000}

func TestEchoIntegrityGo(t *testing.T) {
	url := start(t, Config{Kind: Echo})
	client := &http.Client{}
	for _, n := range echoSizes {
		body := make([]byte, n)
		_, _ = rand.Read(body)
		resp, err := client.Post(url+"/echo", "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%d bytes: read: %v", n, err)
		}
		if resp.StatusCode != 200 || !bytes.Equal(got, body) {
			t.Errorf("%d bytes: status %d, got %d bytes, equal %v", n, resp.StatusCode, len(got), bytes.Equal(got, body))
		}
		if resp.ContentLength != int64(n) {
			t.Errorf("%d bytes: Content-Length %d", n, resp.ContentLength)
		}
	}
	// A chunked request (no Content-Length) is echoed with a length too.
	body := bytes.Repeat([]byte("chunk"), 50_000)
	req, _ := http.NewRequest("POST", url, io.MultiReader(bytes.NewReader(body)))
	req.ContentLength = -1
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(got, body) || resp.ContentLength != int64(len(body)) {
		t.Errorf("chunked: got %d bytes (Content-Length %d), want %d", len(got), resp.ContentLength, len(body))
	}
}

func curlPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("needs curl (apt-get install -y curl)")
	}
	return p
}

func TestEchoIntegrityCurl(t *testing.T) {
	curl := curlPath(t)
	url := start(t, Config{Kind: Echo})
	dir := t.TempDir()
	for _, n := range echoSizes {
		in := filepath.Join(dir, fmt.Sprintf("in-%d", n))
		out := filepath.Join(dir, fmt.Sprintf("out-%d", n))
		body := make([]byte, n)
		_, _ = rand.Read(body)
		if err := os.WriteFile(in, body, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(curl, "-sS", "--fail", "-H", "Content-Type: application/octet-stream",
			"--data-binary", "@"+in, "-o", out, "-w", "%{http_code} %{size_download}", url+"/echo")
		res, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%d bytes: curl: %v: %s", n, err, res)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if string(res) != "200 "+strconv.Itoa(n) || !bytes.Equal(got, body) {
			t.Errorf("%d bytes: curl says %q, equal %v", n, res, bytes.Equal(got, body))
		}
	}
}

func TestCurlKindsAndKeepAlive(t *testing.T) {
	curl := curlPath(t)
	for _, tt := range []struct {
		kind Kind
		args []string
		want string // body of each response
	}{
		{Hello, nil, "Hello, World!"},
		{Static, []string{"-d", "ignored"}, string(StaticBody(1000))},
		{Recv, []string{"-d", "data"}, ""},
		{Echo, []string{"-d", "abc"}, "abc"},
	} {
		t.Run(string(tt.kind), func(t *testing.T) {
			url := start(t, Config{Kind: tt.kind})
			// Three transfers in one curl process: with keep-alive, only
			// the first connects (num_connects counts new connections).
			args := append([]string{"-sS", "--fail", "-w", "|%{http_code} %{num_connects}\n"}, tt.args...)
			args = append(args, url+"/a", url+"/b", url+"/c")
			out, err := exec.Command(curl, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("curl: %v: %s", err, out)
			}
			want := tt.want + "|200 1\n" + tt.want + "|200 0\n" + tt.want + "|200 0\n"
			if string(out) != want {
				t.Errorf("curl output\n%q\nwant\n%q", out, want)
			}
		})
	}
}

func TestKeepAliveReusesConnection(t *testing.T) {
	for _, k := range Kinds {
		t.Run(string(k), func(t *testing.T) {
			url := start(t, Config{Kind: k})
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			body := bytes.Repeat([]byte{'z'}, 300_000) // above Go's 256 KiB post-handler drain
			for i := range 4 {
				var reused bool
				trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { reused = ci.Reused }}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
					"POST", url, bytes.NewReader(body))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.Close {
					t.Fatalf("request %d: status %d, close %v", i, resp.StatusCode, resp.Close)
				}
				if reused != (i > 0) {
					t.Errorf("request %d: reused %v", i, reused)
				}
			}
		})
	}
}

func TestMaxBody(t *testing.T) {
	for _, k := range Kinds {
		t.Run(string(k), func(t *testing.T) {
			url := start(t, Config{Kind: k, MaxBody: 1000})
			for _, tt := range []struct {
				name    string
				n       int
				chunked bool
				want    int
			}{
				{"at limit", 1000, false, 200},
				{"over limit", 1001, false, 413},
				{"chunked at limit", 1000, true, 200},
				{"chunked over limit", 5000, true, 413},
			} {
				var r io.Reader = bytes.NewReader(make([]byte, tt.n))
				if tt.chunked {
					r = io.MultiReader(r)
				}
				req, _ := http.NewRequest("POST", url, r)
				if tt.chunked {
					req.ContentLength = -1
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", tt.name, err)
				}
				msg, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tt.want {
					t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
				}
				if tt.want == 413 && !strings.Contains(string(msg), "larger than 1000 bytes") {
					t.Errorf("%s: 413 body %q does not name the limit", tt.name, msg)
				}
			}
		})
	}
}

func TestCloseAndShutdown(t *testing.T) {
	srv, err := Listen(t.Context(), Config{Kind: Hello, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(context.Background()) }()
	resp, err := http.Get("http://" + srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for range 2 {
		if err := srv.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	// Close without Run releases the port too.
	srv2, err := Listen(t.Context(), Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := srv2.Addr().String()
	if err := srv2.Close(); err != nil {
		t.Fatal(err)
	}
	srv3, err := Listen(t.Context(), Config{Listen: addr})
	if err != nil {
		t.Fatalf("port of a closed, never run server still taken: %v", err)
	}
	srv3.Close()
}

func TestListenErrors(t *testing.T) {
	if _, err := Listen(t.Context(), Config{Kind: "nope"}); err == nil || !strings.Contains(err.Error(), "must be one of") {
		t.Errorf("bad kind: %v", err)
	}
	srv, err := Listen(t.Context(), Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := Listen(t.Context(), Config{Listen: srv.Addr().String()}); err == nil || !strings.Contains(err.Error(), "listen 127.0.0.1:") {
		t.Errorf("port in use: %v", err)
	}
}

// BenchmarkEchoKeepAlive1KB measures one keep-alive 1 KB echo over loopback
// with Go's client (package load has the same with its own client).
func BenchmarkEchoKeepAlive1KB(b *testing.B) {
	srv, err := Listen(b.Context(), Config{Kind: Echo, Listen: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	url := "http://" + srv.Addr().String() + "/"
	client := &http.Client{Transport: &http.Transport{}}
	body := make([]byte, 1024)
	buf := make([]byte, 4096)
	b.SetBytes(int64(2 * len(body)))
	for b.Loop() {
		resp, err := client.Post(url, "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				break
			}
		}
		resp.Body.Close()
	}
}

// runAndDial runs a server for cfg on a loopback port, with newGrace for a
// silent connection when it is not zero, and dials it once it has accepted
// the connection; cancel starts the graceful shutdown, done gives Run's
// result.
func runAndDial(t *testing.T, cfg Config, newGrace time.Duration) (srv *Server, c net.Conn, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	srv, err := Listen(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if newGrace != 0 {
		srv.newGrace = newGrace
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	errc := make(chan error, 1)
	go func() { errc <- srv.Run(ctx) }()
	c, err = net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	waitConns(t, srv, "the connection accepted", func(states []int32) bool { return len(states) == 1 })
	return srv, c, cancel, errc
}

// waitConns waits until cond holds for the states of srv's connections.
func waitConns(t *testing.T, srv *Server, what string, cond func(states []int32) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		srv.mu.Lock()
		var states []int32
		for c := range srv.conns {
			states = append(states, c.state.Load())
		}
		srv.mu.Unlock()
		if cond(states) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestGracefulShutdown: a request in flight when Run's context ends still
// gets its answer; Run returns after it.
func TestGracefulShutdown(t *testing.T) {
	srv, c, cancel, done := runAndDial(t, Config{Kind: Echo}, 0)
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello"); err != nil {
		t.Fatal(err)
	}
	// Cancel once the server is reading the request: before that it is
	// not in flight yet.
	waitConns(t, srv, "the request in flight", func(states []int32) bool { return len(states) == 1 && states[0] == stateBusy })
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned with a request in flight: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := io.WriteString(c, "world"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "helloworld" {
		t.Errorf("in-flight request got %d %q", resp.StatusCode, body)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the last request")
	}
}

// TestShutdownAnswersARequestJustAccepted: a connection accepted before the
// shutdown that has sent nothing yet is not closed as idle: its request may
// be on its way (net/http waits for such connections too). The grace and
// the shutdown's timeout are long, so that a slow host passes too.
func TestShutdownAnswersARequestJustAccepted(t *testing.T) {
	_, c, cancel, done := runAndDial(t, Config{Kind: Hello, ShutdownTimeout: time.Hour}, time.Hour)
	cancel()
	time.Sleep(20 * time.Millisecond) // the shutdown's first sweep
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("request sent just after the shutdown began: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != HelloBody || !resp.Close {
		t.Errorf("got %d %q (close %v), want 200 %q and Connection: close", resp.StatusCode, body, resp.Close, HelloBody)
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestShutdownClosesASilentConnection: a connection that has sent nothing
// for longer than the grace is closed by the shutdown at once, not held
// until its timeout (an hour here), and Run returns.
func TestShutdownClosesASilentConnection(t *testing.T) {
	_, c, cancel, done := runAndDial(t, Config{Kind: Hello, ShutdownTimeout: time.Hour}, time.Nanosecond)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read on the silent connection after the shutdown: %d bytes, %v; want EOF", n, err)
	}
}

// TestPeerReports checks that the peer workload tells whoever runs it each
// request's source address and path, a line per request whatever the path
// holds.
func TestPeerReports(t *testing.T) {
	var out testenv.Output
	url := start(t, Config{Kind: Peer, Peers: &out})
	var want string
	for _, path := range []string{"/nodeport", "/a%0Ab"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "127.0.0.1\n" {
			t.Errorf("GET %s: body %q, want the client's address", path, body)
		}
		p, _ := neturl.PathUnescape(path)
		want += fmt.Sprintf("peer 127.0.0.1 %q\n", p)
	}
	if out.String() != want {
		t.Errorf("peers reported\n%q\nwant\n%q", out.String(), want)
	}
}

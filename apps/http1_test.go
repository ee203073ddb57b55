package apps

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// exchangeRaw sends raw on a new connection to a server for cfg and returns
// the responses it reads until the server closes the connection or goes
// quiet, with whether it closed.
func exchangeRaw(t *testing.T, cfg Config, raw string) (resps []*http.Response, bodies []string, closed bool) {
	t.Helper()
	url := start(t, cfg)
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return resps, bodies, !(errors.As(err, &ne) && ne.Timeout())
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read body: %v", err)
		}
		resps, bodies = append(resps, resp), append(bodies, string(b))
	}
}

func TestRawRequests(t *testing.T) {
	tests := []struct {
		name   string
		kind   Kind
		raw    string
		status []int  // one per expected response
		body   string // substring of the last body
		closed bool   // the server closes after the last response
	}{
		{"content-length", Echo, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", []int{200}, "hello", false},
		{"pipelined", Echo, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\naPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nbb", []int{200, 200}, "bb", false},
		{"chunked with extension and trailer", Echo, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: v\r\n\r\n", []int{200}, "abcde", false},
		{"empty line before request", Hello, "\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", []int{200}, HelloBody, false},
		{"connection close", Hello, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []int{200}, HelloBody, true},
		{"http/1.0 closes", Hello, "GET / HTTP/1.0\r\n\r\n", []int{200}, HelloBody, true},
		{"http/1.0 keep-alive", Hello, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", []int{200}, HelloBody, false},
		{"recv discards", Recv, "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: x\r\n\r\n", []int{200, 200}, "", false},
		{"malformed request line", Echo, "GARBAGE\r\n\r\n", []int{400}, "malformed request line", true},
		{"http/2", Echo, "GET / HTTP/2.0\r\nHost: x\r\n\r\n", []int{505}, "HTTP/1.x only", true},
		{"no host", Echo, "GET / HTTP/1.1\r\n\r\n", []int{400}, "Host", true},
		{"two hosts", Echo, "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", []int{400}, "Host", true},
		{"space before colon", Echo, "GET / HTTP/1.1\r\nHost : x\r\n\r\n", []int{400}, "malformed header field", true},
		{"folded field", Echo, "GET / HTTP/1.1\r\nHost: x\r\n y\r\n\r\n", []int{400}, "malformed header field", true},
		{"bad length", Echo, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", []int{400}, "Content-Length", true},
		{"conflicting lengths", Echo, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", []int{400}, "conflicting", true},
		{"length and chunked", Echo, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []int{400}, "both", true},
		{"gzip coding", Echo, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", []int{501}, "not implemented", true},
		{"bad chunk size", Echo, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", []int{400}, "chunk size", true},
		{"chunk longer than its size", Echo, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", []int{400}, "chunk data", true},
		{"unknown expectation", Echo, "POST / HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 1\r\n\r\na", []int{417}, "expectation", true},
		{"empty transfer coding", Echo, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\nContent-Length: 1\r\n\r\na", []int{501}, "not implemented", true},
		{"bare LF in chunked framing", Echo, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab\r\n0\r\n\r\n", []int{400}, "without CR", true},
		{"http/1.0 chunked closes", Echo, "POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", []int{200}, "a", true},
		{"junk after the version", Echo, "GET / HTTP/1.1 x\r\nHost: x\r\n\r\n", []int{400}, "malformed request line", true},
		{"head too large", Echo, "GET / HTTP/1.1\r\nHost: x\r\nX: " + strings.Repeat("a", maxHeadBytes) + "\r\n\r\n", []int{431}, "larger than", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resps, bodies, closed := exchangeRaw(t, Config{Kind: tt.kind}, tt.raw)
			if len(resps) != len(tt.status) {
				t.Fatalf("got %d responses (%q), want %d", len(resps), bodies, len(tt.status))
			}
			for i, r := range resps {
				if r.StatusCode != tt.status[i] {
					t.Errorf("response %d: status %d, want %d (%q)", i, r.StatusCode, tt.status[i], bodies[i])
				}
			}
			if last := bodies[len(bodies)-1]; !strings.Contains(last, tt.body) {
				t.Errorf("last body %q does not contain %q", last, tt.body)
			}
			if closed != tt.closed {
				t.Errorf("connection closed: %v, want %v", closed, tt.closed)
			}
		})
	}
}

func TestHeadAnswersWithoutBody(t *testing.T) {
	url := start(t, Config{Kind: Static})
	resp, err := http.Head(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != DefaultStaticSize {
		t.Errorf("HEAD: %d, Content-Length %d; want 200, %d", resp.StatusCode, resp.ContentLength, DefaultStaticSize)
	}
}

// TestExpectContinue: the server says 100 Continue before the client sends
// the body, and refuses a body over the limit without asking for it.
func TestExpectContinue(t *testing.T) {
	url := start(t, Config{Kind: Echo, MaxBody: 10})
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("before the body: %q, %v; want 100 Continue", line, err)
	}
	if l, _ := br.ReadString('\n'); l != "\r\n" {
		t.Fatalf("100 Continue ends with %q", l)
	}
	io.WriteString(c, "abcd")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "abcd" {
		t.Fatalf("after the body: %d %q", resp.StatusCode, b)
	}
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 413 {
		t.Fatalf("over the limit: %d, want 413 without 100 Continue", resp.StatusCode)
	}
}

// TestEchoAllocatesNothing: a keep-alive echo costs the server no
// allocation once the connection's buffers exist (net/http allocated
// about 2.5 KB per request).
func TestEchoAllocatesNothing(t *testing.T) {
	url := start(t, Config{Kind: Echo})
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := []byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n" + strings.Repeat("x", 1024))
	want := 0
	resp := make([]byte, 4096)
	roundTrip := func() {
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		n := 0
		for n == 0 || n < want {
			k, err := c.Read(resp[n:])
			if err != nil {
				t.Fatal(err)
			}
			n += k
			if want == 0 {
				if i := bytes.Index(resp[:n], []byte("\r\n\r\n")); i >= 0 {
					want = i + 4 + 1024
				}
			}
		}
	}
	roundTrip()
	if allocs := testing.AllocsPerRun(200, roundTrip); allocs >= 1 {
		t.Errorf("%.1f allocations per request, want none", allocs)
	}
}

// TestAnnouncedBodyIsNotAllocated: the echo buffer grows with the body that
// arrives, not with the Content-Length a head announces.
func TestAnnouncedBodyIsNotAllocated(t *testing.T) {
	c := &conn{s: &Server{cfg: Config{MaxBody: 1 << 40}.withDefaults()}}
	c.rd = reader{src: bytes.NewReader(make([]byte, 100<<10)), buf: make([]byte, initialBuffer)}
	c.h.length = 1 << 40
	if _, err := c.readBody(true); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a body cut short: %v, want an unexpected EOF", err)
	}
	if cap(c.body) > 1<<20 {
		t.Fatalf("%d bytes held for 100 KiB received", cap(c.body))
	}
}

// FuzzRequest feeds anything to the request reader: it must end with a
// request, a refusal RFC 9110 names, or the connection's end — never a
// panic or a loop.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\nabc\r\n0\r\nT: v\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"\r\nHEAD /x?y HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
		"GET / HTTP/2.0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	refusals := map[int]bool{400: true, 413: true, 417: true, 431: true, 501: true, 505: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := &reader{src: bytes.NewReader(data), buf: make([]byte, 16)}
		var h head
		for range 4 {
			err := readHead(b, &h)
			if err == nil {
				if h.chunked && h.length >= 0 {
					t.Fatal("a request framed both ways was accepted")
				}
				err = readChunkedOrLength(b, &h)
			}
			var se *statusError
			switch {
			case err == nil:
				continue
			case errors.As(err, &se):
				if !refusals[se.status] {
					t.Fatalf("refused with %d", se.status)
				}
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			default:
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
	})
}

func readChunkedOrLength(b *reader, h *head) error {
	if h.chunked {
		var n int
		err := readChunked(b, 1<<20, func(p []byte) { n += len(p) })
		if err == nil && n > 1<<20 {
			return errors.New("chunked body over its limit")
		}
		return err
	}
	if h.length > 0 {
		return b.discard(min(h.length, 1<<20))
	}
	return nil
}

package apps

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// The server reads HTTP/1.1 (RFC 9112) itself rather than through net/http:
// net/http allocated about 2.5 KB and woke a second goroutine for every
// request, and the lab's workload servers share the host's CPUs with the
// tool under test, so what they spend is taken from every tool (README,
// "What the cell asks of this host"). It reads what a client of the
// workloads sends — bodies of known length or chunked, Expect:
// 100-continue, HTTP/1.0 — and answers anything else with the status
// RFC 9110 names.

// Limits of a request head, as net/http's defaults.
const (
	// maxHeadBytes bounds a request's line and header fields together;
	// larger heads get 431.
	maxHeadBytes = 1 << 20
	// initialBuffer is a connection's read buffer; it grows for longer
	// heads, up to maxHeadBytes.
	initialBuffer = 4 << 10
	// maxChunkLine bounds a chunk's size line, extensions included.
	maxChunkLine = 4 << 10
)

// statusError is a request the server refuses: it answers status with msg
// and closes the connection.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return fmt.Sprintf("%d %s", e.status, e.msg) }

func refuse(status int, format string, args ...any) error {
	return &statusError{status: status, msg: fmt.Sprintf(format, args...)}
}

// reader buffers a connection's reads; what it returns is valid until the
// next call.
type reader struct {
	src  io.Reader
	buf  []byte
	r, w int
}

// buffered returns how many bytes are read but not consumed.
func (b *reader) buffered() int { return b.w - b.r }

// fill reads once more from the source, making room first: it moves what
// is unconsumed to the front, and grows the buffer when that is full,
// up to limit bytes.
func (b *reader) fill(limit int) error {
	if b.r > 0 {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	if b.w == len(b.buf) {
		if len(b.buf) >= limit {
			return errBufferFull
		}
		nb := make([]byte, min(2*len(b.buf), limit))
		copy(nb, b.buf[:b.w])
		b.buf = nb
	}
	n, err := b.src.Read(b.buf[b.w:])
	b.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

var errBufferFull = errors.New("line too long")

// line returns the next line, without its LF (and CR), reading at most
// limit bytes for it.
func (b *reader) line(limit int) ([]byte, error) {
	l, err := b.rawLine(limit)
	return bytes.TrimSuffix(l, []byte{'\r'}), err
}

// crlfLine is line for the chunked framing, where a line must end in CRLF:
// parsers that disagree on a bare LF there disagree on where a body ends.
func (b *reader) crlfLine(limit int) ([]byte, error) {
	l, err := b.rawLine(limit)
	if err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(l, []byte{'\r'}) {
		return nil, errBareLF
	}
	return l[:len(l)-1], nil
}

var errBareLF = errors.New("bare LF")

// rawLine returns the next line without its LF.
func (b *reader) rawLine(limit int) ([]byte, error) {
	for scanned := 0; ; {
		if i := bytes.IndexByte(b.buf[b.r+scanned:b.w], '\n'); i >= 0 {
			end := b.r + scanned + i
			l := b.buf[b.r:end]
			b.r = end + 1
			return l, nil
		}
		scanned = b.w - b.r
		if scanned >= limit {
			return nil, errBufferFull
		}
		if err := b.fill(limit); err != nil {
			return nil, err
		}
	}
}

// readFull fills p, from the buffer first.
func (b *reader) readFull(p []byte) error {
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	if n == len(p) {
		return nil
	}
	_, err := io.ReadFull(b.src, p[n:])
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// discard drops n bytes.
func (b *reader) discard(n int64) error {
	for n > 0 {
		if b.r == b.w {
			if err := b.fill(len(b.buf)); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		k := min(n, int64(b.w-b.r))
		b.r += int(k)
		n -= k
	}
	return nil
}

// head is a request's line and the header fields the workloads look at.
// Its byte slices are the connection's, reused from request to request.
type head struct {
	method, target, contentType []byte
	// minor is the protocol's minor version: HTTP/1.minor.
	minor int
	// length is Content-Length, -1 when absent.
	length  int64
	chunked bool
	// close: the connection ends after this exchange (Connection: close,
	// or HTTP/1.0 without keep-alive).
	close bool
	// keepAlive: an HTTP/1.0 client asked to keep the connection.
	keepAlive bool
	// expectContinue: the client waits for 100 Continue before the body.
	expectContinue bool
}

// hasBody reports whether a body follows the head.
func (h *head) hasBody() bool { return h.chunked || h.length > 0 }

func (h *head) isHead() bool { return string(h.method) == http.MethodHead }

// readHead reads and checks a request head. A refused request is a
// *statusError; any other error is the connection's.
func readHead(b *reader, h *head) error {
	method, target, contentType := h.method[:0], h.target[:0], h.contentType[:0]
	*h = head{method: method, target: target, contentType: contentType, length: -1}
	budget := maxHeadBytes
	next := func() ([]byte, error) {
		if budget <= 0 {
			return nil, refuse(http.StatusRequestHeaderFieldsTooLarge, "request head larger than %d bytes", maxHeadBytes)
		}
		l, err := b.line(budget)
		if errors.Is(err, errBufferFull) {
			return nil, refuse(http.StatusRequestHeaderFieldsTooLarge, "request head larger than %d bytes", maxHeadBytes)
		}
		budget -= len(l) + 1
		return l, err
	}
	// RFC 9112 §2.2: a server should ignore empty lines before the
	// request line (some clients send one after a POST body).
	var line []byte
	for {
		l, err := next()
		if err != nil {
			return err
		}
		if len(l) > 0 {
			line = l
			break
		}
	}
	if err := h.parseRequestLine(line); err != nil {
		return err
	}
	var hosts int
	var te []byte
	sawTE := false
	for {
		l, err := next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(l) == 0 {
			break
		}
		name, value, err := splitField(l)
		if err != nil {
			return err
		}
		switch {
		case fieldIs(name, "content-length"):
			n, ok := parseLength(value)
			if !ok {
				return refuse(http.StatusBadRequest, "invalid Content-Length %q", value)
			}
			if h.length >= 0 && h.length != n {
				return refuse(http.StatusBadRequest, "conflicting Content-Length fields")
			}
			h.length = n
		case fieldIs(name, "transfer-encoding"):
			if sawTE {
				te = append(te, ',')
			}
			te = append(te, value...)
			sawTE = true
		case fieldIs(name, "connection"):
			for _, opt := range bytes.Split(value, []byte{','}) {
				switch opt = bytes.TrimSpace(opt); {
				case fieldIs(opt, "close"):
					h.close = true
				case fieldIs(opt, "keep-alive"):
					h.keepAlive = true
				}
			}
		case fieldIs(name, "expect"):
			if !fieldIs(value, "100-continue") {
				return refuse(http.StatusExpectationFailed, "unsupported expectation %q", value)
			}
			h.expectContinue = true
		case fieldIs(name, "host"):
			hosts++
		case fieldIs(name, "content-type"):
			h.contentType = append(h.contentType[:0], value...)
		}
	}
	if sawTE {
		if !fieldIs(te, "chunked") {
			return refuse(http.StatusNotImplemented, "transfer coding %q not implemented (only chunked)", te)
		}
		if h.length >= 0 {
			// A request framed two ways is how requests are smuggled past
			// proxies (RFC 9112 §6.3).
			return refuse(http.StatusBadRequest, "both Transfer-Encoding and Content-Length")
		}
		h.chunked = true
	}
	if h.minor >= 1 && hosts != 1 {
		return refuse(http.StatusBadRequest, "an HTTP/1.1 request needs exactly one Host field, got %d", hosts)
	}
	if h.minor == 0 {
		// A chunked body from an HTTP/1.0 client is framing it cannot
		// have meant; the connection ends after it (RFC 9112 §6.1).
		h.close = h.close || !h.keepAlive || h.chunked
		h.expectContinue = false
	}
	return nil
}

// parseRequestLine reads "METHOD TARGET HTTP/1.x".
func (h *head) parseRequestLine(l []byte) error {
	method, rest, ok1 := bytes.Cut(l, []byte{' '})
	target, version, ok2 := bytes.Cut(rest, []byte{' '})
	if !ok1 || !ok2 || !isToken(method) || len(target) == 0 || !visible(target) {
		return refuse(http.StatusBadRequest, "malformed request line %q", clip(l))
	}
	if len(version) != 8 || string(version[:5]) != "HTTP/" || !isDigit(version[5]) || version[6] != '.' || !isDigit(version[7]) {
		return refuse(http.StatusBadRequest, "malformed request line %q", clip(l))
	}
	if version[5] != '1' {
		return refuse(http.StatusHTTPVersionNotSupported, "protocol %q not supported (HTTP/1.x only)", version)
	}
	h.minor = int(version[7] - '0')
	h.method = append(h.method, method...)
	h.target = append(h.target, target...)
	return nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// splitField splits "name: value", trimming the value's whitespace.
func splitField(l []byte) (name, value []byte, err error) {
	name, value, ok := bytes.Cut(l, []byte{':'})
	if !ok || !isToken(name) {
		// A line starting with whitespace is an obsolete folded
		// continuation, which RFC 9112 §5.2 lets a server reject.
		return nil, nil, refuse(http.StatusBadRequest, "malformed header field %q", clip(l))
	}
	value = bytes.Trim(value, " \t")
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, refuse(http.StatusBadRequest, "control character in header field %q", clip(name))
		}
	}
	return name, value, nil
}

// fieldIs compares case-insensitively with an all-lowercase want.
func fieldIs(b []byte, want string) bool {
	if len(b) != len(want) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != want[i] {
			return false
		}
	}
	return true
}

// parseLength reads a Content-Length: digits only, below 2^63.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// isToken reports whether b is a non-empty RFC 9110 token.
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c >= 0x80 || !tokenChar[c] {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// visible reports whether b has no space or control character.
func visible(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// clip shortens what an error quotes from a request.
func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// readChunked reads a chunked body (RFC 9112 §7.1), at most max bytes, and
// passes each piece of data to sink, which may keep it only until it
// returns. Trailer fields are read and dropped.
func readChunked(b *reader, max int64, sink func([]byte)) error {
	var total int64
	for {
		l, err := b.crlfLine(maxChunkLine)
		if err != nil {
			return chunkErr(err)
		}
		size, _, _ := bytes.Cut(l, []byte{';'})
		n, err := strconv.ParseUint(string(bytes.TrimRight(size, " \t")), 16, 63)
		if err != nil {
			return refuse(http.StatusBadRequest, "malformed chunk size %q", clip(l))
		}
		if n == 0 {
			break
		}
		if total += int64(n); total > max || total < 0 {
			return refuse(http.StatusRequestEntityTooLarge, "request body larger than %d bytes", max)
		}
		for left := int64(n); left > 0; {
			if b.r == b.w {
				if err := b.fill(len(b.buf)); err != nil {
					return chunkErr(err)
				}
			}
			k := min(left, int64(b.w-b.r))
			sink(b.buf[b.r : b.r+int(k)])
			b.r += int(k)
			left -= k
		}
		if l, err := b.crlfLine(maxChunkLine); err != nil {
			return chunkErr(err)
		} else if len(l) != 0 {
			return refuse(http.StatusBadRequest, "chunk data longer than its size")
		}
	}
	for budget := maxHeadBytes; ; {
		if budget <= 0 {
			return refuse(http.StatusRequestHeaderFieldsTooLarge, "trailer fields larger than %d bytes", maxHeadBytes)
		}
		l, err := b.crlfLine(min(budget, maxChunkLine))
		if err != nil {
			return chunkErr(err)
		}
		if len(l) == 0 {
			return nil
		}
		budget -= len(l) + 1
	}
}

func chunkErr(err error) error {
	switch {
	case errors.Is(err, errBareLF):
		return refuse(http.StatusBadRequest, "chunk line ends without CR")
	case errors.Is(err, errBufferFull):
		return refuse(http.StatusBadRequest, "chunk line longer than %d bytes", maxChunkLine)
	case err == io.EOF:
		return io.ErrUnexpectedEOF
	}
	return err
}

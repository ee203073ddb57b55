package tunnel

import (
	"io"
	"net"
	"sync"

	"github.com/strait-net/strait/internal/rawsock"
)

// maxBatch is how many bytes of TLS records recordBatcher gathers before it
// writes them even while corked: large enough to turn a 1 MB transfer into
// a handful of system calls, small enough to keep the pipe to the kernel
// moving.
const maxBatch = 256 << 10

// recordBatcher sits between crypto/tls and the TCP socket. crypto/tls
// writes every record (at most 16 KiB) with a write(2) of its own, so a
// 1 MB transfer costs 64 system calls per hop, which measured as half the
// gateways' CPU time. While the session's writer has work queued it corks
// the batcher, which gathers the records and writes them with one call when
// the writer runs dry or the batch is full. Uncorked (the handshake, alerts)
// it writes through. It reads and writes a TCP socket with raw system calls
// (internal/rawsock), sparing the runtime's system call bookkeeping on every
// record; Conn stays the connection for its socket options and deadlines.
type recordBatcher struct {
	net.Conn
	sock   io.ReadWriter // Conn's socket
	mu     sync.Mutex
	corked bool
	buf    []byte
}

func newRecordBatcher(c net.Conn) *recordBatcher {
	b := &recordBatcher{Conn: c, sock: c}
	if tc, ok := c.(*net.TCPConn); ok {
		if rc, err := rawsock.NewConn(tc); err == nil {
			b.sock = rc
		}
	}
	return b
}

func (b *recordBatcher) Read(p []byte) (int, error) { return b.sock.Read(p) }

func (b *recordBatcher) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.corked && len(b.buf) == 0 {
		return b.sock.Write(p)
	}
	if b.buf == nil {
		b.buf = make([]byte, 0, maxBatch+maxRecordWire)
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= maxBatch || !b.corked {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// maxRecordWire is the largest TLS 1.3 record on the wire (16 KiB of
// plaintext, the content type, the AEAD tag and the 5-byte header, with
// room to spare), so one append after maxBatch never grows the buffer.
const maxRecordWire = 16<<10 + 256 + 5

// cork makes writes gather until uncork.
func (b *recordBatcher) cork() {
	b.mu.Lock()
	b.corked = true
	b.mu.Unlock()
}

// uncork writes what was gathered and lets later writes through.
func (b *recordBatcher) uncork() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.corked = false
	return b.flushLocked()
}

func (b *recordBatcher) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.sock.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/rawsock"
	"github.com/strait-net/strait/tunnel"
)

// copyBufSize is large enough that one read drains a socket receiving at
// several Gbit/s. A stream holds one only while its connection has data to
// read (copyConn), so idle streams cost none.
const copyBufSize = 128 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// splice copies between a TCP connection and a stream until both directions
// ended. An orderly end (EOF) in one direction is passed on as a half-close,
// so request/response protocols that half-close keep working; an error in
// either direction aborts both. It returns the bytes copied each way.
// firstByte, if set, is called when the first bytes from c arrived.
func splice(c *net.TCPConn, st tunnel.Stream, firstByte func()) (toStream, toConn int64, err error) {
	var wg sync.WaitGroup
	var upErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		toStream, upErr = copyConn(st, c, firstByte)
		if upErr == nil {
			upErr = st.CloseWrite()
		}
		if upErr != nil {
			_ = st.Reset("client connection failed")
			_ = c.SetLinger(0)
			_ = c.Close()
		}
	}()
	toConn, err = copyStream(c, st)
	if err == nil {
		err = c.CloseWrite()
	}
	if err != nil {
		_ = c.SetLinger(0)
		_ = c.Close()
		_ = st.Reset("target connection failed")
	}
	wg.Wait()
	_ = c.Close()
	_ = st.Close()
	return toStream, toConn, errors.Join(err, upErr)
}

// copyStream copies from st to c until st ends.
func copyStream(c *net.TCPConn, st tunnel.Stream) (int64, error) {
	// A TLS tunnel stream hands its received buffers to the connection
	// itself (one writev for all that arrived), sparing a copy through a
	// buffer, and holds none while idle; a small frame that finds it
	// waiting reaches c from the session's reader, without waking it.
	if wt, ok := st.(io.WriterTo); ok {
		return wt.WriteTo(c)
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	return io.CopyBuffer(c, st, *bp)
}

// copyConn copies from c to dst until c ends. It takes a buffer from the
// pool only once c has something to read and gives it back when a read
// drained the socket: ten thousand idle streams holding 128 KiB each
// would be 1.3 GB of buffers doing nothing. firstByte, if set, is called
// when the first bytes arrived.
func copyConn(dst io.Writer, c *net.TCPConn, firstByte func()) (int64, error) {
	r, err := newPooledReader(c)
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		bp, nr, rerr := r.read()
		if nr > 0 && firstByte != nil {
			firstByte()
			firstByte = nil
		}
		var werr error
		if nr > 0 {
			var nw int
			nw, werr = dst.Write((*bp)[:nr])
			n += int64(nw)
		}
		if bp != nil {
			bufPool.Put(bp)
		}
		switch {
		case werr != nil:
			return n, werr
		case rerr == io.EOF:
			return n, nil
		case rerr != nil:
			return n, rerr
		}
	}
}

// pooledReader reads a connection into buffers from the pool, waiting in
// the runtime's poller, without a buffer, while the socket is empty. It
// holds what one read's callback produces, and the callback bound once:
// a closure per read was four allocations each time, 12 of the 133 a new
// connection cost in BenchmarkStreamEcho1KB (client included).
type pooledReader struct {
	rc   syscall.RawConn
	fill func(fd uintptr) bool // r.fillFrom, bound once
	bp   *[]byte
	nr   int
	rerr error
}

func newPooledReader(c syscall.Conn) (*pooledReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &pooledReader{rc: rc}
	r.fill = r.fillFrom
	return r, nil
}

// fillFrom is the raw read: a read that finds nothing gives its buffer
// back before the wait.
func (r *pooledReader) fillFrom(fd uintptr) bool {
	r.bp = bufPool.Get().(*[]byte)
	r.nr, r.rerr = rawsock.Read(int(fd), *r.bp)
	if r.rerr == unix.EAGAIN {
		bufPool.Put(r.bp)
		r.bp = nil
		return false
	}
	return true
}

// read reads once into a buffer from the pool: one read(2) per arrival,
// where peeking for data first and then reading took two. It returns the
// buffer (nil when nothing was read), the bytes read, and io.EOF at the
// end of stream; closing the connection or its read deadline ends the
// wait with the error a read would return.
func (r *pooledReader) read() (*[]byte, int, error) {
	r.bp, r.nr, r.rerr = nil, 0, nil
	err := r.rc.Read(r.fill)
	bp, nr, rerr := r.bp, r.nr, r.rerr
	r.bp = nil
	switch {
	case err != nil:
		rerr = err
	case rerr != nil:
		rerr = os.NewSyscallError("read", rerr)
	case nr == 0:
		rerr = io.EOF
	}
	if nr <= 0 && bp != nil {
		bufPool.Put(bp)
		bp, nr = nil, 0
	}
	return bp, nr, rerr
}

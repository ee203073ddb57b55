package gateway

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

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
	// buffer, and holds none while idle.
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
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int64
	drained := true // the last read left the socket empty: wait before taking a buffer
	for {
		if drained {
			if err := waitReadable(rc); err != nil {
				return n, err
			}
		}
		bp := bufPool.Get().(*[]byte)
		buf := *bp
		nr, rerr := c.Read(buf)
		if nr > 0 && firstByte != nil {
			firstByte()
			firstByte = nil
		}
		var werr error
		if nr > 0 {
			var nw int
			nw, werr = dst.Write(buf[:nr])
			n += int64(nw)
		}
		bufPool.Put(bp)
		drained = nr < len(buf)
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

// waitReadable returns once c's socket has data, an end of stream or an
// error to read, without a buffer: it peeks a byte without waiting and,
// while there is none, lets the runtime's poller wait. Closing c or its
// read deadline ends the wait with the error a read would return.
func waitReadable(rc syscall.RawConn) error {
	var b [1]byte
	return rc.Read(func(fd uintptr) bool {
		for {
			_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if err == unix.EINTR {
				continue
			}
			return err != unix.EAGAIN
		}
	})
}

package gateway

import (
	"errors"
	"io"
	"net"
	"sync"

	"github.com/strait-net/strait/tunnel"
)

// copyBufSize is large enough that one read drains a socket receiving at
// several Gbit/s, and small enough for thousands of concurrent streams.
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
		var src io.Reader = c
		if firstByte != nil {
			src = &firstRead{r: c, f: firstByte}
		}
		toStream, upErr = copyHalf(st, src)
		if upErr == nil {
			upErr = st.CloseWrite()
		}
		if upErr != nil {
			_ = st.Reset("client connection failed")
			_ = c.SetLinger(0)
			_ = c.Close()
		}
	}()
	toConn, err = copyHalf(c, st)
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

func copyHalf(dst io.Writer, src io.Reader) (int64, error) {
	// A tunnel stream hands its received buffers to the connection itself
	// (one writev for all that arrived), sparing a copy through buf.
	if wt, ok := src.(io.WriterTo); ok {
		if _, isConn := src.(*net.TCPConn); !isConn {
			return wt.WriteTo(dst)
		}
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var n int64
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// firstRead calls f once, when its first read returned data.
type firstRead struct {
	r io.Reader
	f func()
}

func (fr *firstRead) Read(p []byte) (int, error) {
	n, err := fr.r.Read(p)
	if n > 0 && fr.f != nil {
		fr.f()
		fr.f = nil
	}
	return n, err
}

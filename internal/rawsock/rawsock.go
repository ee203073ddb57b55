// Package rawsock reads and writes non-blocking sockets with system calls
// that bypass the Go runtime's bookkeeping for system calls.
//
// Every read(2) and write(2) through the net package enters the runtime's
// "in a system call" state. Two costs come with it that a gateway pays on
// every request when requests arrive one at a time, each waking it from
// idle:
//   - entering the state wakes the runtime's monitor thread (sysmon) when
//     the process was idle;
//   - a call that outlasts the monitor's 20 µs tick has its P (the right to
//     run Go code) taken away and handed to another thread. A write through
//     a veth runs the receiver's network stack in the same call and often
//     lasts that long.
//
// At seed 002's rate cell (10 000 requests/s of 1 KB, README "Performance")
// each gateway's monitor thread woke about 8 000 times a second: 45 % of
// the gateway's context switches. A read or write on a non-blocking socket
// never sleeps in the kernel, so it may be a raw system call, as the runtime
// itself makes for calls that cannot block. Waiting for a socket to become
// readable or writable still goes through the runtime's poller
// (syscall.RawConn), so deadlines and Close work as for any connection.
package rawsock

import (
	"io"
	"os"
	"syscall"
)

// maxIovecs bounds the buffers one Writev passes to the kernel on Linux;
// the rest go in the next call.
const maxIovecs = 64

// Conn reads and writes a connection's socket with raw system calls. Like a
// net.Conn it allows one Read and one Write at a time, concurrently.
type Conn struct {
	rc syscall.RawConn

	// Read's state. The callbacks are bound once: a closure per call
	// would allocate on every read and write.
	readFn func(fd uintptr) bool
	rp     []byte
	rn     int
	rerr   error

	// Write's state: what is left to write (iov), its backing array kept
	// between calls (iovAt), what was written and the call's error.
	writeFn func(fd uintptr) bool
	iov     [][]byte
	iovAt   [][]byte
	wn      int64
	werr    error
}

// NewConn returns a Conn on c's socket, which the runtime keeps
// non-blocking (every net.Conn's is).
func NewConn(c syscall.Conn) (*Conn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	k := &Conn{rc: rc}
	k.readFn = k.readOnce
	k.writeFn = k.writeAll
	return k, nil
}

// Read reads what the socket has, waiting in the poller while it has
// nothing. It returns io.EOF at the end of stream.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rp, c.rn, c.rerr = p, 0, nil
	err := c.rc.Read(c.readFn)
	n, rerr := c.rn, c.rerr
	c.rp = nil
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, os.NewSyscallError("read", rerr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *Conn) readOnce(fd uintptr) bool {
	c.rn, c.rerr = Read(int(fd), c.rp)
	return c.rerr != syscall.EAGAIN
}

// Write writes all of p, waiting in the poller while the socket's buffer
// is full.
func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.WriteBuffers(p)
	return int(n), err
}

// WriteBuffers writes all of bufs in order with as few writev(2) calls as
// the socket's buffer allows, as net.Buffers does: a header and a body leave
// in one segment when they fit.
func (c *Conn) WriteBuffers(bufs ...[]byte) (int64, error) {
	c.iovAt = append(c.iovAt[:0], bufs...)
	c.iov, c.wn, c.werr = c.iovAt, 0, nil
	err := c.rc.Write(c.writeFn)
	n, werr := c.wn, c.werr
	clear(c.iovAt)
	c.iov = nil
	if err == nil && werr != nil {
		err = os.NewSyscallError("writev", werr)
	}
	return n, err
}

func (c *Conn) writeAll(fd uintptr) bool {
	for {
		for len(c.iov) > 0 && len(c.iov[0]) == 0 {
			c.iov = c.iov[1:]
		}
		if len(c.iov) == 0 {
			return true
		}
		n, err := Writev(int(fd), c.iov)
		c.wn += int64(n)
		for n > 0 {
			k := min(n, len(c.iov[0]))
			c.iov[0] = c.iov[0][k:]
			n -= k
			if len(c.iov[0]) == 0 {
				c.iov = c.iov[1:]
			}
		}
		switch err {
		case nil:
		case syscall.EAGAIN:
			return false
		default:
			c.werr = err
			return true
		}
	}
}

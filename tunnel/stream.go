package tunnel

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/rawsock"
)

// maxWriteChunk bounds how much of one Write is handed to the writer at once,
// so control frames and other streams' data wait at most this long.
const maxWriteChunk = 256 << 10

type stream struct {
	s      *session
	id     uint32
	header []byte

	mu sync.Mutex // guards the fields below
	// receive side
	chunks   [][]byte // chunks[0][off:] is the next unread data
	off      int
	buffered int
	recv     recvWindow
	granted  uint64 // of recv.size, what came from the session's growth budget
	received uint64
	finRecv  bool
	readDL   time.Time
	// send side
	sendLimit   uint64
	sent        uint64
	writeClosed bool // CloseWrite or Close called
	writeDL     time.Time
	// both
	rst        *ResetError
	readClosed bool // Close called
	removed    bool

	readNotify  chan struct{}
	writeNotify chan struct{}
	// sink is WriteTo's connection while WriteTo waits with nothing
	// buffered: the reader then writes small frames to it itself
	// (directSink).
	sink *directSink

	wmu   sync.Mutex // serializes Write and the FIN of CloseWrite
	wreq  writeReq
	wdone chan error
}

func newStream(s *session, id uint32, header []byte, window uint64) *stream {
	st := &stream{
		s:           s,
		id:          id,
		header:      header,
		recv:        newRecvWindow(initialStreamWindow, uint64(s.cfg.MaxStreamWindow), time.Now()),
		sendLimit:   initialStreamWindow,
		readNotify:  make(chan struct{}, 1),
		writeNotify: make(chan struct{}, 1),
		wdone:       make(chan error, 1),
	}
	if window > initialStreamWindow {
		st.granted = s.takeGrowth(window - initialStreamWindow)
		st.recv.grow(initialStreamWindow + st.granted)
	}
	return st
}

func (st *stream) Header() []byte { return st.header }

func (st *stream) SetDeadline(t time.Time) error {
	st.mu.Lock()
	st.readDL, st.writeDL = t, t
	st.mu.Unlock()
	notify(st.readNotify)
	notify(st.writeNotify)
	return nil
}

func (st *stream) SetReadDeadline(t time.Time) error {
	st.mu.Lock()
	st.readDL = t
	st.mu.Unlock()
	notify(st.readNotify)
	return nil
}

func (st *stream) SetWriteDeadline(t time.Time) error {
	st.mu.Lock()
	st.writeDL = t
	st.mu.Unlock()
	notify(st.writeNotify)
	return nil
}

// wait blocks until a notification, the session's end or the deadline.
func wait(c <-chan struct{}, also <-chan struct{}, closed <-chan struct{}, deadline time.Time) {
	var tc <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-c:
	case <-also:
	case <-closed:
	case <-tc:
	}
}

func pastDeadline(d time.Time) bool { return !d.IsZero() && !time.Now().Before(d) }

func (st *stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := st.waitData(nil); err != nil {
		return 0, err
	}
	n := 0
	for n < len(p) && len(st.chunks) > 0 {
		c := st.chunks[0]
		k := copy(p[n:], c[st.off:])
		n += k
		st.off += k
		if st.off == len(c) {
			putChunk(c)
			st.chunks[0] = nil
			st.chunks = st.chunks[1:]
			st.off = 0
		}
	}
	st.buffered -= n
	st.creditLocked(n)
	return n, nil
}

// WriteTo writes the stream's data to w until EOF, handing the received
// buffers to w as they are (one writev(2) for all that is buffered when w is
// a TCP connection) instead of copying them through a caller's buffer. A
// gateway forwarding a stream to a TCP connection saves a copy of every
// byte and, behind a burst, system calls. While it waits with nothing
// buffered, the session's reader writes small frames to a socket w itself
// (directSink), so a request or response crosses no goroutine handoff.
func (st *stream) WriteTo(w io.Writer) (int64, error) {
	var total int64
	var bufs net.Buffers
	var owned [][]byte
	sink := newDirectSink(w)
	for {
		err := st.waitData(sink)
		if sink != nil {
			// Disarmed by waitData: the reader no longer touches it.
			total += sink.written
			sink.written = 0
		}
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return total, err
		}
		n := st.buffered
		owned = append(owned[:0], st.chunks...)
		bufs = bufs[:0]
		for i, c := range st.chunks {
			if i == 0 {
				c = c[st.off:]
			}
			bufs = append(bufs, c)
			st.chunks[i] = nil
		}
		st.chunks, st.off = st.chunks[:0], 0
		st.buffered = 0
		st.mu.Unlock()
		b := bufs
		k, err := b.WriteTo(w)
		total += k
		for i, c := range owned {
			putChunk(c)
			owned[i] = nil
		}
		// Credit the windows once w took the data, so a slow w holds the
		// peer back by the window, as a reader that has not read yet does.
		st.mu.Lock()
		st.creditLocked(n)
		if err != nil {
			return total, err
		}
	}
}

// waitData returns with st.mu held and data buffered, or with st.mu not
// held and the reason no data will come (io.EOF after FIN). sink, when
// not nil, is armed while it waits and disarmed when it returns; an error
// of a write to it ends the wait.
func (st *stream) waitData(sink *directSink) error {
	s := st.s
	for {
		st.mu.Lock()
		st.sink = nil
		if st.buffered > 0 {
			return nil
		}
		var err error
		switch {
		case sink != nil && sink.err != nil:
			err = sink.err
		case st.readClosed:
			err = ErrClosedStream
		case st.rst != nil:
			err = st.rst
		case st.finRecv:
			err = io.EOF
		case s.isClosed():
			err = s.closedErr()
		case pastDeadline(st.readDL):
			err = os.ErrDeadlineExceeded
		}
		if err != nil {
			st.mu.Unlock()
			return err
		}
		dl := st.readDL
		st.sink = sink
		st.mu.Unlock()
		wait(st.readNotify, nil, s.closed, dl)
	}
}

// creditLocked credits n bytes taken out of the buffer to the stream's and
// the session's windows; st.mu is held and released.
func (st *stream) creditLocked(n int) {
	s := st.s
	var limit uint64
	var update bool
	oldSize := st.recv.size
	if !st.finRecv && st.rst == nil {
		// The window may double only as far as the growth budget allows.
		s.fmu.Lock()
		st.recv.max = min(uint64(s.cfg.MaxStreamWindow), st.recv.size+s.growBudget-s.growUsed)
		limit, update = st.recv.consume(uint64(n), time.Now(), s.tuneRTT())
		s.growUsed += st.recv.size - oldSize
		s.fmu.Unlock()
		st.granted += st.recv.size - oldSize
	}
	grew := st.recv.size > oldSize
	size := st.recv.size
	st.mu.Unlock()
	if grew {
		s.streamWindowGrew(size)
	}
	if update {
		s.queueWindow(st.id, limit)
	}
}

// onData receives one DATA frame (reader goroutine).
func (st *stream) onData(h frameHeader, scratch *[]byte) error {
	s := st.s
	n := int(h.length)
	st.mu.Lock()
	if st.finRecv {
		st.mu.Unlock()
		return fmt.Errorf("%w: DATA on stream %d after FIN", ErrProtocol, st.id)
	}
	if st.received+uint64(n) > st.recv.limit {
		st.mu.Unlock()
		return fmt.Errorf("%w: stream %d flow control: %d bytes beyond the window", ErrProtocol, st.id, st.received+uint64(n)-st.recv.limit)
	}
	st.received += uint64(n)
	discard := st.readClosed || st.rst != nil
	st.mu.Unlock()

	// Large frames are read straight into a buffer of their own; small ones
	// go through scratch and are appended to the last buffer.
	var data, big []byte
	if n > 0 {
		var err error
		if !discard && n >= 4<<10 {
			big = getChunk(n)[:n]
			_, err = io.ReadFull(s.rd, big)
			data = big
		} else {
			data, err = s.readPayload(n, scratch)
		}
		if err != nil {
			return err
		}
	}
	s.st.bytesReceived.Add(uint64(n))

	st.mu.Lock()
	fin := h.flags&flagFIN != 0
	if fin {
		st.finRecv = true
	}
	if st.readClosed || st.rst != nil {
		resetPeer := n > 0 && st.rst == nil
		if resetPeer {
			st.rst = &ResetError{Reason: "stream closed"}
		}
		remove := resetPeer || (st.finRecv && st.writeClosed)
		st.mu.Unlock()
		if big != nil {
			putChunk(big)
		}
		s.consumed(uint64(n))
		if resetPeer {
			// Like TCP's RST: data arrived that nobody will read.
			s.queueReset(st.id, "stream closed by the receiver")
		}
		if remove {
			st.remove()
		}
		return nil
	}
	// A frame that finds WriteTo waiting with nothing buffered goes to its
	// connection from here (directSink); what the socket does not take at
	// once is buffered for WriteTo, which then writes it, waiting.
	direct := 0
	var sinkErr bool
	if sink := st.sink; sink != nil && n > 0 && n <= maxDirectWrite && st.buffered == 0 {
		k, err := sink.write(data)
		sink.written += int64(k)
		direct = k
		if err != nil {
			// WriteTo returns the error; the rest is never delivered.
			sink.err, sinkErr, direct = err, true, n
		}
	}
	if rest := data[direct:]; len(rest) > 0 {
		switch k := len(st.chunks); {
		case big != nil:
			if direct > 0 {
				// The rest of a direct write: chunks was empty.
				st.off = direct
			}
			st.chunks = append(st.chunks, big)
			big = nil
		case k > 0 && cap(st.chunks[k-1])-len(st.chunks[k-1]) >= len(rest):
			st.chunks[k-1] = append(st.chunks[k-1], rest...)
		default:
			c := getChunk(max(len(rest), 16<<10))
			st.chunks = append(st.chunks, append(c, rest...))
		}
		st.buffered += len(rest)
	}
	done := st.finRecv && st.writeClosed
	wake := st.buffered > 0 || fin || sinkErr
	if direct > 0 && !sinkErr {
		s.st.directWrites.Add(1)
		st.creditLocked(direct)
	} else {
		st.mu.Unlock()
	}
	if big != nil {
		putChunk(big)
	}
	// Credited to the session as it enters the stream's buffer: the stream
	// window bounds what the stream holds (sessionCredit in session.go).
	s.consumed(uint64(n))
	if wake {
		notify(st.readNotify)
	}
	if done {
		st.remove()
	}
	return nil
}

func (st *stream) remove() {
	st.mu.Lock()
	if st.removed {
		st.mu.Unlock()
		return
	}
	st.removed = true
	granted := st.granted
	st.granted = 0
	st.mu.Unlock()
	st.s.releaseGrowth(granted)
	st.s.removeStream(st.id)
}

func (st *stream) onWindow(limit uint64) {
	st.mu.Lock()
	if limit > st.sendLimit {
		st.sendLimit = limit
	}
	st.mu.Unlock()
	notify(st.writeNotify)
}

func (st *stream) onReset(reason string) {
	st.mu.Lock()
	if st.rst == nil {
		st.rst = &ResetError{Reason: reason, Remote: true}
	}
	st.mu.Unlock()
	notify(st.readNotify)
	notify(st.writeNotify)
	st.remove()
}

// waitCredit blocks until stream and session both allow sending, and takes
// up to want bytes of credit.
func (st *stream) waitCredit(want int) (int, error) {
	s := st.s
	for {
		st.mu.Lock()
		switch {
		case st.rst != nil:
			st.mu.Unlock()
			return 0, st.rst
		case st.writeClosed:
			st.mu.Unlock()
			return 0, ErrClosedStream
		case s.isClosed():
			st.mu.Unlock()
			return 0, s.closedErr()
		case pastDeadline(st.writeDL):
			st.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		var sessWake <-chan struct{}
		if avail := st.sendLimit - st.sent; avail > 0 {
			got, wake := s.reserve(min(avail, uint64(want), maxWriteChunk))
			if got > 0 {
				st.sent += got
				st.mu.Unlock()
				return int(got), nil
			}
			sessWake = wake
		}
		dl := st.writeDL
		st.mu.Unlock()
		wait(st.writeNotify, sessWake, s.closed, dl)
	}
}

func (st *stream) Write(p []byte) (int, error) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	total := 0
	for len(p) > 0 {
		n, err := st.waitCredit(len(p))
		if err != nil {
			return total, err
		}
		st.wreq = writeReq{hdr: frameHeader{typ: frameData, stream: st.id}, payload: p[:n], done: st.wdone}
		inline, err := st.s.writeInline(&st.wreq)
		if !inline {
			if err := st.s.enqueue(&st.wreq, false); err != nil {
				return total, err
			}
			// The writer signals every request it dequeued, also on
			// failure, so p is never referenced after this.
			err = <-st.wdone
		}
		if err != nil {
			return total, fmt.Errorf("write: %w", err)
		}
		st.s.st.bytesSent.Add(uint64(n))
		total += n
		p = p[n:]
	}
	return total, nil
}

func (st *stream) CloseWrite() error {
	st.mu.Lock()
	if st.writeClosed || st.rst != nil {
		st.writeClosed = true
		st.mu.Unlock()
		return nil
	}
	st.writeClosed = true
	st.mu.Unlock()
	notify(st.writeNotify) // a blocked Write gives up

	st.wmu.Lock()
	err := st.s.enqueue(&writeReq{hdr: frameHeader{typ: frameData, flags: flagFIN, stream: st.id}}, false)
	st.wmu.Unlock()
	st.mu.Lock()
	done := st.finRecv || st.rst != nil
	st.mu.Unlock()
	if done {
		st.remove()
	}
	if err != nil {
		return fmt.Errorf("close write: %w", err)
	}
	return nil
}

func (st *stream) Close() error {
	err := st.CloseWrite()
	st.mu.Lock()
	if st.readClosed {
		st.mu.Unlock()
		return nil
	}
	st.readClosed = true
	unread := st.releaseLocked()
	reset := unread > 0 && st.rst == nil && !st.finRecv
	if reset {
		st.rst = &ResetError{Reason: "stream closed"}
	}
	done := st.finRecv || st.rst != nil
	st.mu.Unlock()
	notify(st.readNotify)
	if reset {
		st.s.queueReset(st.id, "stream closed by the receiver with unread data")
	}
	if done {
		st.remove()
	}
	if err != nil && !st.s.isClosed() {
		return err
	}
	return nil
}

// releaseLocked drops unread data and returns how much there was.
func (st *stream) releaseLocked() int {
	n := st.buffered
	for _, c := range st.chunks {
		putChunk(c)
	}
	st.chunks, st.off, st.buffered = nil, 0, 0
	return n
}

func (st *stream) Reset(reason string) error {
	st.mu.Lock()
	if st.rst != nil || (st.finRecv && st.writeClosed && st.buffered == 0) {
		st.mu.Unlock()
		return nil
	}
	st.rst = &ResetError{Reason: reason}
	st.releaseLocked()
	st.mu.Unlock()
	notify(st.readNotify)
	notify(st.writeNotify)
	st.s.queueReset(st.id, reason)
	st.remove()
	return nil
}

// maxDirectWrite is the largest frame the session's reader writes to a
// waiting WriteTo's connection itself. A request or response fits; bulk
// frames (dataFrameSize) stay with WriteTo, so the reader goes on
// decrypting while WriteTo writes, on another core.
const maxDirectWrite = 16 << 10

// directSink lets the session's reader write a frame to the connection a
// WriteTo forwards the stream to, while WriteTo waits with nothing
// buffered: the frame then crosses no goroutine handoff (the reader waking
// WriteTo, which writes and sleeps again: the inbound handoff of README,
// "Performance"). The write never waits: what the socket does not take at
// once stays buffered and wakes WriteTo. Its fields belong to whoever armed
// or disarmed it under st.mu last: the reader while it is st.sink, WriteTo
// otherwise.
type directSink struct {
	rc      syscall.RawConn
	fn      func(fd uintptr) bool // d.writeTo, bound once
	p       []byte                // what fn writes
	n       int                   // what fn wrote
	werr    error                 // fn's error
	written int64                 // bytes written for WriteTo's count
	err     error                 // a failed write, for WriteTo to return
}

// newDirectSink returns a sink for w, nil when w is no socket.
func newDirectSink(w io.Writer) *directSink {
	c, ok := w.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	d := &directSink{rc: rc}
	d.fn = d.writeTo
	return d
}

// write writes what of p the socket takes without waiting.
func (d *directSink) write(p []byte) (int, error) {
	d.p, d.n, d.werr = p, 0, nil
	err := d.rc.Write(d.fn)
	d.p = nil
	if err != nil {
		return 0, err
	}
	return d.n, d.werr
}

// writeTo is the raw write (internal/rawsock); it never asks to wait (true
// in every case).
func (d *directSink) writeTo(fd uintptr) bool {
	n, err := rawsock.Write(int(fd), d.p)
	switch err {
	case nil:
		d.n = n
	case unix.EAGAIN:
	default:
		d.werr = os.NewSyscallError("write", err)
	}
	return true
}

package tunnel

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestWriteInline holds writeInline to the writer's rules: a Write that
// finds the writer idle writes its frame itself, after the control frames
// queued before it (a new stream's OPEN goes out before its first DATA),
// and leaves the role free; with another stream's data queued, or the
// writer holding the role, it leaves its frame to the writer, so streams
// keep taking turns; on a closed writer it fails. The session's goroutines
// do not run: the queues stay as the test sets them.
func TestWriteInline(t *testing.T) {
	local, remote := net.Pipe()
	defer local.Close()
	defer remote.Close()
	s := &session{conn: local, bw: bufio.NewWriter(local), cfg: (&Config{}).withDefaults(),
		wsig: make(chan struct{}, 1), closed: make(chan struct{}), start: time.Now()}
	s.log = s.cfg.logger()
	frames := make(chan frameHeader, 16)
	go func() {
		defer close(frames)
		var hb [frameHeaderLen]byte
		for {
			if _, err := io.ReadFull(remote, hb[:]); err != nil {
				return
			}
			h := decodeFrameHeader(hb[:])
			if _, err := io.CopyN(io.Discard, remote, int64(h.length)); err != nil {
				return
			}
			frames <- h
		}
	}()
	next := func() frameHeader {
		t.Helper()
		select {
		case h := <-frames:
			return h
		case <-time.After(30 * time.Second): // a hang bound only
			t.Fatal("no frame arrived")
			return frameHeader{}
		}
	}

	open := &writeReq{hdr: frameHeader{typ: frameOpen, stream: 1, length: 3}, payload: []byte("hdr")}
	if err := s.enqueue(open, true); err != nil {
		t.Fatal(err)
	}
	data := &writeReq{hdr: frameHeader{typ: frameData, stream: 1}, payload: []byte("hello")}
	if ok, err := s.writeInline(data); !ok || err != nil {
		t.Fatalf("writeInline on an idle writer = %v, %v; want it written", ok, err)
	}
	for _, want := range []frameHeader{{typ: frameOpen, stream: 1, length: 3}, {typ: frameData, stream: 1, length: 5}} {
		if h := next(); h != want {
			t.Fatalf("frame %+v, want %+v", h, want)
		}
	}
	if len(s.ctrlQ) != 0 || s.writing {
		t.Fatalf("after writeInline: %d control frames queued, role held %v; want none, free", len(s.ctrlQ), s.writing)
	}

	other := &writeReq{hdr: frameHeader{typ: frameData, stream: 3}, payload: []byte("x")}
	if err := s.enqueue(other, false); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.writeInline(data); ok {
		t.Error("writeInline wrote ahead of another stream's queued data")
	}
	s.dataQ = s.dataQ[:0]
	s.writing = true
	if ok, _ := s.writeInline(data); ok {
		t.Error("writeInline wrote while the writer held the role")
	}
	s.writing = false
	s.wclosed = true
	if ok, err := s.writeInline(data); !ok || err == nil {
		t.Errorf("writeInline on a closed writer = %v, %v; want an error", ok, err)
	}
}

// TestQueuedFramesShareTheInlineFlush holds a Write writing inline to
// taking along what was queued meanwhile: a frame queued while the role is
// held wakes no writer goroutine (the holder looks at the queues before it
// lets the role go), the holder writes the control frames and then data in
// order within inlineBatch, and leaves what does not fit to the writer;
// with the role free, a queued frame wakes the writer.
func TestQueuedFramesShareTheInlineFlush(t *testing.T) {
	local, remote := net.Pipe()
	defer local.Close()
	defer remote.Close()
	go func() { _, _ = io.Copy(io.Discard, remote) }()
	s := &session{conn: local, bw: bufio.NewWriter(local), cfg: (&Config{}).withDefaults(),
		wsig: make(chan struct{}, 1), closed: make(chan struct{}), start: time.Now()}
	s.log = s.cfg.logger()

	s.writing = true
	small := &writeReq{hdr: frameHeader{typ: frameData, stream: 3}, payload: make([]byte, 100)}
	window := &writeReq{hdr: frameHeader{typ: frameWindow, length: 8}, payload: make([]byte, 8)}
	large := &writeReq{hdr: frameHeader{typ: frameData, stream: 5}, payload: make([]byte, inlineBatch)}
	for _, q := range []struct {
		r    *writeReq
		ctrl bool
	}{{small, false}, {window, true}, {large, false}} {
		if err := s.enqueue(q.r, q.ctrl); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-s.wsig:
		t.Error("a frame queued while the role was held woke the writer")
	default:
	}
	drained, err := s.writeQueued()
	if err != nil || len(drained) != 2 || drained[0] != window || drained[1] != small {
		t.Fatalf("writeQueued wrote %d requests (%v); want the WINDOW frame, then the small data", len(drained), err)
	}
	if len(s.dataQ) != 1 || s.dataQ[0] != large || len(s.ctrlQ) != 0 {
		t.Fatalf("after writeQueued: %d data and %d control frames queued; want the large data only", len(s.dataQ), len(s.ctrlQ))
	}

	s.writing = false
	s.dataQ = s.dataQ[:0]
	if err := s.enqueue(small, false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.wsig:
	default:
		t.Error("a frame queued with the role free did not wake the writer")
	}
}

// TestReadyWritersShareOneFlush: Writes of several streams that become
// ready to run together (as the readers of connections whose requests the
// poller returned at once) share the flush of the one that took the role,
// on one P too, instead of a write(2) each.
func TestReadyWritersShareOneFlush(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var sink countingWriter
	// The session's buffer size, and records past their ramp, so that
	// only flushes write.
	s := &session{bw: bufio.NewWriterSize(&sink, 64<<10), ramp: rampRecords, cfg: (&Config{}).withDefaults(),
		wsig: make(chan struct{}, 1), closed: make(chan struct{}), start: time.Now()}
	s.log = s.cfg.logger()
	const writers = 16
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			r := &writeReq{hdr: frameHeader{typ: frameData, stream: uint32(2*i + 1)}, payload: make([]byte, 1000), done: make(chan error, 1)}
			<-start
			inline, err := s.writeInline(r)
			if !inline {
				if err = s.enqueue(r, false); err == nil {
					err = <-r.done
				}
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if want := writers * (frameHeaderLen + 1000); sink.bytes != want {
		t.Fatalf("%d bytes written, want %d", sink.bytes, want)
	}
	if sink.writes >= writers {
		t.Errorf("%d writers ready together made %d writes, want them to share flushes", writers, sink.writes)
	}
	t.Logf("%d writers ready together: %d writes", writers, sink.writes)
}

// countingWriter counts the writes it takes, as the socket below a session
// would see them.
type countingWriter struct{ writes, bytes int }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes++
	c.bytes += len(p)
	return len(p), nil
}

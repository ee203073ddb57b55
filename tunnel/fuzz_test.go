package tunnel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"
)

func rawFrame(typ frameType, flags byte, stream uint32, payload []byte) []byte {
	b := make([]byte, frameHeaderLen, frameHeaderLen+len(payload))
	frameHeader{typ: typ, flags: flags, length: uint16(len(payload)), stream: stream}.encode(b)
	return append(b, payload...)
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func fuzzSeeds() [][]byte {
	cat := func(fs ...[]byte) []byte { return bytes.Join(fs, nil) }
	return [][]byte{
		nil,
		rawFrame(frameOpen, 0, 1, []byte("export=web")),
		cat(rawFrame(frameOpen, 0, 1, []byte("h")), rawFrame(frameData, 0, 1, []byte("hello")), rawFrame(frameData, flagFIN, 1, nil)),
		cat(rawFrame(frameOpen, 0, 1, nil), rawFrame(frameWindow, 0, 1, u64(1<<20)), rawFrame(frameReset, 0, 1, []byte("bye"))),
		cat(rawFrame(framePing, 0, 0, u64(7)), rawFrame(framePing, flagACK, 0, u64(7)), rawFrame(frameWindow, 0, 0, u64(8<<20))),
		rawFrame(frameGoAway, 0, 0, []byte("maintenance")),
		cat(rawFrame(frameOpen, 0, 3, nil), rawFrame(frameOpen, 0, 1, nil)),
		rawFrame(frameData, 0, 5, []byte("x")),
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		rawFrame(frameOpen, 0, 1, []byte("export=web"))[:frameHeaderLen+3],
		cat(rawFrame(frameOpen, 0, 1, nil), rawFrame(frameWindow, 0, 1, u64(1<<64-1)), rawFrame(frameWindow, 0, 1, u64(1<<64-1)), rawFrame(frameData, 0, 1, []byte("x"))),
		cat(rawFrame(frameWindow, 0, 0, u64(1<<64-1)), rawFrame(frameWindow, 0, 0, u64(1<<64-1))),
		cat(rawFrame(framePing, flagACK, 0, u64(1<<64-1)), rawFrame(framePing, flagACK, 0, u64(0))),
		rawFrame(frameOpen, 0, 1<<32-1, []byte("\xff\xfe")),
		rawFrame(frameReset, 0, 1, []byte("\xff\xfe\xc3")),
	}
}

// FuzzFrameHeader: decoding never panics, validation is total, and a header
// survives encode(decode(b)).
func FuzzFrameHeader(f *testing.F) {
	for _, s := range fuzzSeeds() {
		if len(s) >= frameHeaderLen {
			f.Add(s[:frameHeaderLen])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < frameHeaderLen {
			return
		}
		h := decodeFrameHeader(b)
		err := h.validate(4096)
		if err != nil && !errors.Is(err, ErrProtocol) {
			t.Fatalf("validate error %v does not wrap ErrProtocol", err)
		}
		var out [frameHeaderLen]byte
		h.encode(out[:])
		if !bytes.Equal(out[:], b[:frameHeaderLen]) {
			t.Fatalf("round trip: % x -> % x", b[:frameHeaderLen], out)
		}
	})
}

// fuzzConn feeds fixed input to a session and swallows what it writes.
type fuzzConn struct {
	net.Conn // nil: the session uses only the methods below
	r        io.Reader
	closed   chan struct{}
	once     sync.Once
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		// Hold the end open a moment so frames already queued are handled
		// as they would be on a live connection.
		select {
		case <-c.closed:
		case <-time.After(time.Millisecond):
		}
	}
	return n, err
}
func (c *fuzzConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *fuzzConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// FuzzSession feeds arbitrary bytes to a listening session that reads every
// stream it accepts: it must end with an error (never panic, hang or
// allocate beyond its windows) and Close must return.
func FuzzSession(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	cfg := (&Config{Logger: slog.New(slog.DiscardHandler), KeepaliveTimeout: time.Minute}).withDefaults()
	f.Fuzz(func(t *testing.T, input []byte) {
		conn := &fuzzConn{r: bytes.NewReader(input), closed: make(chan struct{})}
		s := newSession(conn, nil, false, "fuzz", "", "", cfg)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				st, err := s.AcceptStream(context.Background())
				if err != nil {
					return
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					io.Copy(io.Discard, st)
					st.Close()
				}()
			}
		}()
		select {
		case <-s.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("session did not end after its input ended")
		}
		if s.Err() == nil {
			t.Fatal("session ended without an error")
		}
		s.Close()
		wg.Wait()
	})
}

func TestRecvWindowAutotune(t *testing.T) {
	const rtt = 40 * time.Millisecond
	now := time.Unix(0, 0)
	for _, tc := range []struct {
		name     string
		perRead  time.Duration // time to consume 64 KiB
		wantGrow bool
	}{
		{"fast reader grows to max", time.Millisecond, true},
		{"slow reader stays small", 50 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newRecvWindow(initialStreamWindow, 16<<20, now)
			clock := now
			for range 2000 {
				clock = clock.Add(tc.perRead)
				w.consume(64<<10, clock, rtt)
			}
			grew := w.size > initialStreamWindow
			if grew != tc.wantGrow {
				t.Fatalf("window size %d KiB after 2000 reads, grow=%v want %v", w.size>>10, grew, tc.wantGrow)
			}
			if tc.wantGrow && w.size != 16<<20 {
				t.Fatalf("window %d KiB, want the 16 MiB maximum", w.size>>10)
			}
			if w.limit-w.consumed > w.size {
				t.Fatalf("advertised %d bytes beyond consumption, more than the window %d", w.limit-w.consumed, w.size)
			}
		})
	}
}

func TestChunkClass(t *testing.T) {
	for _, n := range []int{1, 4096, 4097, 8192, 20000, 32768, 65535} {
		b := getChunk(n)
		if cap(b) < n || cap(b) >= 2*n && cap(b) > 4096 {
			t.Fatalf("getChunk(%d) has cap %d, want [n, 2n)", n, cap(b))
		}
		putChunk(b)
	}
}

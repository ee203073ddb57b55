package rawsock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// pair returns the two ends of a loopback TCP connection, the first wrapped.
func pair(t *testing.T) (*TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	wl := Listener{Listener: ln}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := wl.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	peer, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	c := <-accepted
	rc, ok := c.(*TCPConn)
	if !ok {
		t.Fatalf("Listener.Accept returned %T, want *rawsock.TCPConn", c)
	}
	t.Cleanup(func() { _ = rc.Close(); _ = peer.Close() })
	return rc, peer
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// A write far larger than both sockets' buffers must wait in the poller
// for the peer to read and still deliver every byte in order.
func TestWriteWaitsForTheReader(t *testing.T) {
	c, peer := pair(t)
	want := pattern(16 << 20)
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // let the buffers fill first
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	n, err := c.Write(want)
	if err != nil || n != len(want) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(want))
	}
	_ = c.CloseWrite()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("peer read %d bytes, not what was written (%d bytes)", len(b), len(want))
	}
}

func TestReadUntilEOF(t *testing.T) {
	c, peer := pair(t)
	want := pattern(3 << 20)
	go func() {
		_, _ = peer.Write(want)
		_ = peer.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not what the peer wrote (%d bytes)", len(got), len(want))
	}
	if n, err := c.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the end = %d, %v; want 0, io.EOF", n, err)
	}
	if n, err := c.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v; want 0, nil", n, err)
	}
}

// Deadlines and Close end a wait as they do for any net.Conn.
func TestDeadlineAndClose(t *testing.T) {
	c, _ := pair(t)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	_ = c.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read when closed: %v, want net.ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
}

// A write to a peer that reset the connection names the system call.
func TestWriteAfterReset(t *testing.T) {
	c, peer := pair(t)
	_ = peer.SetLinger(0)
	_ = peer.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write(pattern(64 << 10))
	}
	var se *os.SyscallError
	if !errors.As(err, &se) || se.Syscall != "writev" {
		t.Fatalf("Write to a reset connection: %v, want a writev SyscallError", err)
	}
}

// WriteBuffers delivers every buffer in order, empty ones and more than
// one writev(2) takes included, waiting while the socket is full.
func TestWriteBuffers(t *testing.T) {
	c, peer := pair(t)
	var bufs [][]byte
	var want []byte
	for i := 0; i < 3*maxIovecs; i++ {
		b := pattern(1 + (i*4099)%(256<<10))
		if i%5 == 0 {
			b = nil
		}
		bufs = append(bufs, b)
		want = append(want, b...)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	n, err := c.WriteBuffers(bufs...)
	if err != nil || n != int64(len(want)) {
		t.Fatalf("WriteBuffers = %d, %v; want %d, nil", n, err, len(want))
	}
	_ = c.CloseWrite()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("peer read %d bytes, not what was written (%d bytes)", len(b), len(want))
	}
	if n, err := c.WriteBuffers(); n != 0 || err != nil {
		t.Fatalf("WriteBuffers() = %d, %v; want 0, nil", n, err)
	}
}

// The callbacks are bound once: a read or write that the socket serves at
// once allocates nothing.
func TestNoAllocations(t *testing.T) {
	c, peer := pair(t)
	msg := pattern(1000)
	buf := make([]byte, 4096)
	pbuf := make([]byte, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, pbuf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
		if _, err := peer.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per write and read, want 0", allocs)
	}
}

package gateway

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
)

// TestPooledReaderReadsWithoutAllocating holds copyConn's read to no
// allocation per read: a closure per read was four, on every carried
// connection's every arrival and end (BenchmarkStreamEcho1KB).
func TestPooledReaderReadsWithoutAllocating(t *testing.T) {
	addr := testenv.FreeAddr(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	r, err := newPooledReader(srv.(*net.TCPConn))
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("x")
	// AllocsPerRun counts the whole process's allocations, so anything
	// another test left running counts too: the bound tolerates a
	// thousand of those in the loop and still catches the closure's four.
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		bp, n, err := r.read()
		if err != nil || n != 1 || (*bp)[0] != 'x' {
			t.Fatalf("read %d bytes, %v; want the 1 written", n, err)
		}
		bufPool.Put(bp)
	})
	if allocs >= 2 {
		t.Errorf("%v allocations per read, want none", allocs)
	}

	// The end of the stream is io.EOF, without a buffer.
	client.Close()
	bp, n, err := r.read()
	if bp != nil || n != 0 || err != io.EOF {
		t.Errorf("after the peer closed: buffer %v, %d bytes, %v; want none, 0, io.EOF", bp != nil, n, err)
	}
}

// TestCopyConnSeesTheEndBehindTheLastBytes: a peer that writes and closes
// at once delivers its last bytes and its FIN together, and the kernel
// takes the FIN along with the read that returns the bytes, with no
// readiness event of its own. Only the read after it, which finds the end
// of the stream, tells; a copy that waits for the poller after a read
// that returned fewer bytes than asked (to spare that read) never sees
// the end and hangs (README, "Performance": why the empty read stays).
func TestCopyConnSeesTheEndBehindTheLastBytes(t *testing.T) {
	addr := testenv.FreeAddr(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A goroutine waiting in the poller makes an idle thread wait in
	// epoll, which takes the bytes' and FIN's event before the copy starts
	// (without a waiter nobody polls, and the event comes late enough to
	// hide a copy that loses it).
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	idleSrv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer idleSrv.Close()
	go func() { _, _ = idleSrv.Read(make([]byte, 1)) }()
	for i := range 20 {
		client, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		// Both before the copy starts: bytes and FIN wait together.
		if _, err := client.Write([]byte("last words")); err != nil {
			t.Fatal(err)
		}
		client.Close()
		time.Sleep(5 * time.Millisecond) // for the poller to take the event (a hang bound is below)
		done := make(chan error, 1)
		var got bytes.Buffer
		go func() {
			_, err := copyConn(&got, srv.(*net.TCPConn), nil)
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil || got.String() != "last words" {
				t.Fatalf("connection %d: copied %q, %v; want the bytes and the end", i, got.String(), err)
			}
		case <-time.After(30 * time.Second): // a hang bound only
			t.Fatalf("connection %d: the end of the stream behind the last bytes was never seen", i)
		}
		srv.Close()
	}
}

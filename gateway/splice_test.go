package gateway

import (
	"io"
	"net"
	"testing"

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

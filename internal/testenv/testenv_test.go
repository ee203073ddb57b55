package testenv

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/strait-net/strait/internal/freeport"
)

// TestFreeAddrHeld: the port FreeAddr gives refuses connections, cannot be
// bound by a socket without SO_REUSEADDR (an outgoing connection's source
// port, another program's fixed bind), and takes a listener — twice, as a
// server that is restarted on its address does — and is refused again in
// between.
func TestFreeAddrHeld(t *testing.T) {
	addr := FreeAddr(t)
	refused := func(when string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("%s: dial %s connected, want refused", when, addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%s: dial %s: %v, want connection refused", when, addr, err)
		}
	}
	refused("before any listener")

	ap := netip.MustParseAddrPort(addr)
	fd, err := freeport.TCPSocket()
	if err != nil {
		t.Fatal(err)
	}
	err = syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()})
	syscall.Close(fd)
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("bind %s without SO_REUSEADDR: %v, want address already in use", addr, err)
	}

	for _, run := range []string{"first", "restarted"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s listener on %s: %v", run, addr, err)
		}
		go func() {
			if c, err := ln.Accept(); err == nil {
				c.Close()
			}
		}()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial the %s listener: %v", run, err)
		}
		c.Close()
		ln.Close()
		refused("after the " + run + " listener closed")
	}
}

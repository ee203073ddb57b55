package freeport

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// Every address is distinct and bindable, even though each listener used
// to find it is closed before the next call, and lies below the ephemeral
// range, where outgoing connections take their ports.
func TestAddrDistinctAndFree(t *testing.T) {
	lo, hi := pickRange()
	if hi <= lo {
		t.Logf("ephemeral range starts too low (%d): the kernel's ports are used", hi)
	}
	seen := map[string]bool{}
	for i := 0; i < 500; i++ {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("call %d returned %s again", i, a)
		}
		seen[a] = true
		_, p, _ := net.SplitHostPort(a)
		if port, _ := strconv.Atoi(p); hi > lo && (port < lo || port >= hi) {
			t.Fatalf("%s: outside [%d, %d)", a, lo, hi)
		}
	}
	a, _ := Addr()
	l, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("bind %s: %v", a, err)
	}
	l.Close()
}

// A port something listens on is never handed out, nor one handed out
// before: of three ports, the first held and the second given, only the
// third comes out, once.
func TestAddrSkipsPortsInUse(t *testing.T) {
	mu.Lock()
	defer mu.Unlock()
	base := 0
	var held net.Listener
	for p := lowest; p+3 < 65536 && held == nil; p += 3 {
		if given[p+1] || given[p+2] || !bindable(p+1) || !bindable(p+2) {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			base, held = p, l
		}
	}
	if held == nil {
		t.Fatal("no three free ports in a row")
	}
	defer held.Close()
	given[base+1] = true
	want := net.JoinHostPort("127.0.0.1", strconv.Itoa(base+2))
	if a, ok := addrIn(base, base+3); !ok || a != want {
		t.Fatalf("addrIn(%d, %d) = %q, %v; want %s", base, base+3, a, ok, want)
	}
	if a, ok := addrIn(base, base+3); ok {
		t.Fatalf("addrIn(%d, %d) again = %q; all three are taken", base, base+3, a)
	}
}

func bindable(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// A port bound by a socket that does not listen, as testenv.FreeAddr
// holds one while its server is down, is not handed out: net.Listen would
// bind beside it (both set SO_REUSEADDR) and call it free.
func TestAddrSkipsHeldPorts(t *testing.T) {
	mu.Lock()
	defer mu.Unlock()
	for p := lowest; p < 65536; p++ {
		if given[p] || !bindable(p) {
			continue
		}
		fd, err := TCPSocket()
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: p, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			continue // taken meanwhile
		}
		if a, ok := addrIn(p, p+1); ok {
			t.Fatalf("addrIn(%d, %d) = %s, a port held by a bound socket", p, p+1, a)
		}
		return
	}
	t.Fatal("no free port to hold")
}

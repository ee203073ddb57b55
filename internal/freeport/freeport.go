// Package freeport hands out loopback TCP addresses for processes a test
// or a benchmark is about to start.
//
// Asking the kernel for port 0 and closing the listener is racy twice
// over. The kernel may give the port it just released to the very next
// bind, so two daemons started one after the other (etcd's client and peer
// URLs, say) can be handed the same port and the second dies with "address
// already in use". And the port comes from the ephemeral range, from which
// the kernel also picks the local port of every outgoing connection on the
// host: on a busy host one of those can take it before the daemon binds.
//
// Addr therefore picks ports below the ephemeral range
// (net.ipv4.ip_local_port_range), which the kernel never hands out on its
// own, checks that nothing listens there, and never returns a port it
// returned before in this process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// lowest is the first port Addr picks from: above the registered ports
// daemons and labs commonly use (8080, 9090, 5201, ...).
const lowest = 10000

// Addr returns "127.0.0.1:port" for a port nothing listened on when it was
// picked and that this process has not been given before.
func Addr() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if a, ok := addrIn(pickRange()); ok {
		return a, nil
	}
	return kernelAddr()
}

// addrIn tries random ports of [lo, hi) not handed out before.
func addrIn(lo, hi int) (string, bool) {
	if hi <= lo {
		return "", false
	}
	for range 1000 {
		port := lo + rand.IntN(hi-lo)
		if given[port] {
			continue
		}
		if !unbound(port) {
			continue // in use
		}
		given[port] = true
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), true
	}
	return "", false
}

// unbound reports whether no socket is bound to 127.0.0.1:port. The check
// binds without SO_REUSEADDR, which net.Listen would set: with it the bind
// succeeds beside a socket that is bound but does not listen, such as the
// one testenv.FreeAddr holds a port with while its server is down, and
// another test process would be given that port.
func unbound(port int) bool {
	fd, err := TCPSocket()
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	return syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}) == nil
}

// pickRange is [lowest, the ephemeral range's start), or an empty range
// where that range starts too low to leave room.
func pickRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var start, end int
	if _, err := fmt.Sscan(string(b), &start, &end); err != nil || start-lowest < 1000 {
		return 0, 0
	}
	return lowest, start
}

// kernelAddr asks the kernel for an ephemeral port, holding every listener
// until one not yet handed out turns up, so the kernel cannot hand back
// the same one on the next try.
func kernelAddr() (string, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for len(held) < 64 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("free loopback port: %w", err)
		}
		held = append(held, l)
		port := l.Addr().(*net.TCPAddr).Port
		if !given[port] {
			given[port] = true
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
		}
	}
	return "", fmt.Errorf("free loopback port: the kernel offered only ports already handed out")
}

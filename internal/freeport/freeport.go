// Package freeport hands out loopback TCP addresses for processes a test
// or a benchmark is about to start.
//
// Asking the kernel for port 0 and closing the listener is racy on its own:
// the kernel may give the port it just released to the very next bind, so
// two daemons started one after the other (etcd's client and peer URLs, say)
// can be handed the same port and the second dies with "address already in
// use". Addr never returns a port it returned before in this process.
package freeport

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Addr returns "127.0.0.1:port" for a port nothing listened on when it was
// picked and that this process has not been given before.
func Addr() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	// Hold every listener until a new port turns up, so the kernel cannot
	// hand back the same one on the next try.
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

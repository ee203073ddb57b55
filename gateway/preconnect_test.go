package gateway

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
)

// acceptOrder listens on a loopback port and reports the remote address of
// every connection it accepts, in the order the kernel queued them: the
// order a server that serves one connection at a time (iperf3) sees.
func acceptOrder(t *testing.T) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", testenv.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	order := make(chan string, 16)
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			order <- c.RemoteAddr().String()
		}
	}()
	return ln.Addr().String(), order
}

// hangBound only bounds a hang; nothing here waits for it to pass.
const hangBound = 30 * time.Second

// TestPreconnectStreamTakesWarmDialInFlight: a stream that arrives while
// the preconnector is dialing (its connection already in the target's
// accept queue) gets that connection, not one of its own that the target
// would accept after the idle warm one. iperf3 waited on the warm one and
// the client hung (preconnector's comment).
func TestPreconnectStreamTakesWarmDialInFlight(t *testing.T) {
	addr, order := acceptOrder(t)
	p := newPreconnector(addr, 1, "", slog.New(slog.DiscardHandler))
	connected, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	p.dial = func(ctx context.Context, addr string) (*net.TCPConn, error) {
		c, err := dialTCP(ctx, addr, "")
		if calls.Add(1) == 1 {
			close(connected) // the first warm connection is established...
			<-release        // ...and its dial has not returned yet
		}
		return c, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.run(ctx)
	select {
	case <-connected:
	case <-time.After(hangBound):
		t.Fatal("the preconnector dialed nothing")
	}
	type result struct {
		c    *net.TCPConn
		warm bool
		err  error
	}
	got := make(chan result, 1)
	go func() {
		c, warm, err := p.get(ctx)
		got <- result{c, warm, err}
	}()
	// Release the warm dial once the stream waits for it (or, wrongly,
	// returned without it).
	var r result
	var returned bool
	for deadline := time.Now().Add(hangBound); !returned; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		waiting := p.demand > 0
		p.mu.Unlock()
		if waiting {
			break
		}
		select {
		case r = <-got:
			returned = true
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("get neither waits nor returns")
		}
	}
	close(release)
	if !returned {
		select {
		case r = <-got:
		case <-time.After(hangBound):
			t.Fatal("get did not return after the warm dial ended")
		}
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	var first string
	select {
	case first = <-order:
	case <-time.After(hangBound):
		t.Fatal("the target accepted nothing")
	}
	if local := r.c.LocalAddr().String(); local != first || !r.warm {
		t.Errorf("stream got %s (warm %v); the target accepted %s first, which then waits ahead of it", local, r.warm, first)
	}
}

// TestPreconnectSkipsDeadWarm: warm connections the target closed (iperf3
// refuses every connection while it runs a test) are dropped, and the
// stream gets a live one.
func TestPreconnectSkipsDeadWarm(t *testing.T) {
	ln, err := net.Listen("tcp", testenv.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	refused := make(chan string, 2)
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if n < 2 {
				refused <- c.RemoteAddr().String()
				_, _ = c.Write([]byte{0xff}) // iperf3's ACCESS_DENIED
				c.Close()
				continue
			}
			conns = append(conns, c)
		}
	}()
	p := newPreconnector(ln.Addr().String(), 2, "", slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.run(ctx)
	for deadline := time.Now().Add(hangBound); ; time.Sleep(time.Millisecond) {
		p.mu.Lock()
		dead := 0
		for _, w := range p.idle {
			if !alive(w.c) {
				dead++
			}
		}
		p.mu.Unlock()
		if dead == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 warm connections refused by the target", dead)
		}
	}
	c, _, err := p.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 2 {
		if r := <-refused; r == c.LocalAddr().String() {
			t.Errorf("get handed out %s, which the target had refused", r)
		}
	}
}

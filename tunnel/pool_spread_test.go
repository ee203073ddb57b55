package tunnel_test

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/strait-net/strait/tunnel"
)

// TestPoolSpreadsStreamsOverSessions: streams open together spread evenly
// over a gateway's sessions whatever their keys (each session is a TCP
// connection with a congestion window of its own: PoolConfig.
// SessionsPerAddr), streams opened one at a time stay on the first
// session, and a session that ends takes only its own streams while new
// ones open on the others.
func TestPoolSpreadsStreamsOverSessions(t *testing.T) {
	const sessions, perSession = 4, 5
	tr := newTLS(t, nil, nil)
	gw := startGateway(t, tr, "A")
	pool := startPool(t, tunnel.PoolConfig{Transport: tr, Peer: "cluster-b", Addrs: []string{gw.ln.Addr().String()},
		SessionsPerAddr: sessions, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	allLive := func() bool { return !slices.Contains(tunnel.PoolLoads(pool), -1) }
	idle := func() bool { return slices.Equal(tunnel.PoolLoads(pool), make([]int, sessions)) }
	waitFor(t, func() bool { return routed(pool, 1)() && allLive() })

	open := func() tunnel.Stream {
		t.Helper()
		// One key for all: with the sessions' loads known, it plays no part.
		st, err := pool.OpenStream(context.Background(), 42, nil)
		if err != nil {
			t.Fatal(err)
		}
		prefix := make([]byte, 2)
		st.SetReadDeadline(time.Now().Add(patience))
		if _, err := io.ReadFull(st, prefix); err != nil {
			t.Fatal(err)
		}
		st.SetReadDeadline(time.Time{})
		return st
	}

	var held []tunnel.Stream
	for range sessions * perSession {
		held = append(held, open())
	}
	if got, want := tunnel.PoolLoads(pool), slices.Repeat([]int{perSession}, sessions); !slices.Equal(got, want) {
		t.Fatalf("%d streams held open: streams per session %v, want %v", len(held), got, want)
	}

	// One at a time: each on the first session, which stays warm.
	for _, st := range held {
		st.Close()
	}
	waitFor(t, idle)
	for range 3 {
		st := open()
		if got := tunnel.PoolLoads(pool); got[0] != 1 || slices.Max(got[1:]) != 0 {
			t.Fatalf("a stream opened alone: streams per session %v, want it on the first", got)
		}
		st.Close()
		waitFor(t, idle)
	}

	// A session that ends fails its own streams and no others; new
	// streams open on the live sessions meanwhile.
	held = held[:0]
	for range sessions * perSession {
		held = append(held, open())
	}
	gw.mu.Lock()
	victim := gw.sess[0]
	gw.mu.Unlock()
	victim.Close()
	failed := 0
	for _, st := range held {
		if _, err := st.Write([]byte("x")); err != nil {
			failed++
			continue
		}
		b := make([]byte, 1)
		st.SetReadDeadline(time.Now().Add(patience))
		_, err := io.ReadFull(st, b)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			t.Fatalf("a stream hung after a session ended: %v", err)
		default:
			failed++
		}
	}
	if failed != perSession {
		t.Errorf("%d streams failed when one of %d sessions ended, want its %d", failed, sessions, perSession)
	}
	for _, st := range held {
		st.Close()
	}
	st := open()
	st.Close()
	waitFor(t, allLive)
}

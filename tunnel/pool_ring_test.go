package tunnel_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/ring"
	"github.com/strait-net/strait/tunnel"
)

// TestPoolRingMovesOnlyDeadFlows kills one of three gateways: exactly its
// flows move, each to the gateway ring.WithDown names, and they come back
// when a gateway listens on its address again.
func TestPoolRingMovesOnlyDeadFlows(t *testing.T) {
	// The pool's silence check needs pings at least every ProbeInterval
	// (PoolConfig's contract); at the default 250 ms an idle gateway would
	// look dead after 3 × 10 ms and lose its flows while alive. The death
	// here is a closed socket, seen without the silence check, and a busy
	// host stalls this process for longer than 3 × 10 ms (which moves new
	// flows off a live gateway, by design): 1000 misses, 10 s, keep the
	// check on without letting a stall pass for a death.
	tr := newTLS(t, nil, func(c *tunnel.Config) { c.KeepaliveInterval = 10 * time.Millisecond })
	gws := []*gateway{startGateway(t, tr, "A"), startGateway(t, tr, "B"), startGateway(t, tr, "C")}
	names := map[string]string{}
	var addrs []string
	for _, g := range gws {
		addrs = append(addrs, g.ln.Addr().String())
		names[g.ln.Addr().String()] = g.name
	}
	pool := startPool(t, tunnel.PoolConfig{
		Transport: tr, Peer: "cluster-b", Addrs: addrs,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		ProbeInterval: 10 * time.Millisecond, ProbeMisses: 1000, RingSeed: 7,
	})
	live := func(n int) func() bool { return routed(pool, n) }
	waitFor(t, live(3))

	which := func(key uint64) string {
		t.Helper()
		st, err := pool.OpenStream(context.Background(), key, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		prefix := make([]byte, 2)
		st.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(st, prefix); err != nil {
			t.Fatal(err)
		}
		return string(prefix[:1])
	}
	table, err := ring.New(addrs, ring.Options{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	const flows = 60
	before := map[uint64]string{}
	for key := range uint64(flows) {
		before[key] = which(key)
		want, _ := table.Lookup(key)
		if before[key] != names[want] {
			t.Fatalf("key %d went to %s, the table says %s", key, before[key], names[want])
		}
	}

	dead := gws[1]
	deadAddr := dead.ln.Addr().String()
	dead.kill()
	waitFor(t, live(2))
	view := table.WithDown(map[string]bool{deadAddr: true})
	moved := 0
	for key := range uint64(flows) {
		got := which(key)
		want, _ := view.Lookup(key)
		if got != names[want] {
			t.Fatalf("after B died key %d went to %s, want %s", key, got, names[want])
		}
		if before[key] == "B" {
			moved++
		} else if got != before[key] {
			t.Fatalf("key %d moved from live gateway %s to %s", key, before[key], got)
		}
	}
	if moved == 0 {
		t.Fatal("no flow was on B; the test shows nothing")
	}

	// B comes back on its address: exactly its flows return.
	startGatewayAt(t, tr, "B", deadAddr)
	waitFor(t, live(3))
	for key := range uint64(flows) {
		if got := which(key); got != before[key] {
			t.Fatalf("after B returned key %d went to %s, want %s", key, got, before[key])
		}
	}
	for _, g := range pool.Gateways() {
		if names[g.Addr] == "B" && g.Downs != 1 {
			t.Errorf("B: %d downs, want 1", g.Downs)
		}
	}
}

// TestPoolWaitLive: WaitLive blocks while no gateway of the peer answers
// and returns once one does, which a starting gateway waits for before it
// reports itself ready.
func TestPoolWaitLive(t *testing.T) {
	tr := newTLS(t, nil, func(c *tunnel.Config) { c.KeepaliveInterval = 10 * time.Millisecond })
	// Nothing listens there until the gateway starts below; the port is
	// held meanwhile (a port picked and closed was taken by the time the
	// gateway started: "address already in use" under load).
	addr := testenv.FreeAddr(t)
	pool := startPool(t, tunnel.PoolConfig{Transport: tr, Peer: "cluster-b", Addrs: []string{addr},
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, ProbeInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if pool.WaitLive(ctx) {
		t.Fatal("WaitLive returned true with no gateway listening")
	}
	startGatewayAt(t, tr, "A", addr)
	// patience bounds a hang, like the package's other waits.
	ctx2, cancel2 := context.WithTimeout(context.Background(), patience)
	defer cancel2()
	if !pool.WaitLive(ctx2) {
		t.Fatalf("WaitLive still false %v after the gateway started", patience)
	}
	if g := pool.Gateways(); !g[0].Live {
		t.Errorf("WaitLive returned but the gateway is not live: %+v", g)
	}
}

// TestPoolWaitLiveAfterClose: a pool closed before it ever ran answers
// WaitLive at once with false, instead of holding a starting gateway until
// its context ends.
func TestPoolWaitLiveAfterClose(t *testing.T) {
	tr := newTLS(t, nil, nil)
	pool, err := tunnel.NewPool(tunnel.PoolConfig{Transport: tr, Peer: "cluster-b", Addrs: []string{"127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if pool.WaitLive(ctx) {
		t.Fatal("WaitLive true on a closed pool")
	}
	if ctx.Err() != nil {
		t.Fatal("WaitLive on a closed pool returned only when its context ended")
	}
}

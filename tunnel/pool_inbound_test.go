package tunnel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/tunneltest"
)

// TestPoolCountsAcceptedSessionsAsLife: a gateway that only sends us
// requests, on a session it dialed, needs no probes on the pool's idle
// sessions to it: the pool counts the accepted session's frames (Attach)
// and stays quiet while the gateway stays live. When that session ends,
// the probes come back. An idle session outside the pool counts the
// probe intervals.
func TestPoolCountsAcceptedSessionsAsLife(t *testing.T) {
	const interval = 10 * time.Millisecond
	tr := newTLS(t, nil, func(c *tunnel.Config) { c.KeepaliveInterval = interval })
	gw := startGateway(t, tr, "A")
	pool := startPool(t, tunnel.PoolConfig{Transport: tr, Peer: "cluster-b", Addrs: []string{gw.ln.Addr().String()},
		SessionsPerAddr: 2, ProbeInterval: interval, ProbeMisses: 3})
	waitFor(t, routed(pool, 1))

	// The gateway's session to us, from the same IP as its listener.
	dialed, accepted := tunneltest.Pair(t, tr)
	if !pool.Attach(accepted) {
		t.Fatalf("Attach: the session from %v was not mapped to the pool's one gateway %v", accepted, gw.ln.Addr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go acceptDiscard(accepted)
	st, err := dialed.OpenStream(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		chunk := make([]byte, 1024)
		for ctx.Err() == nil {
			if _, err := st.Write(chunk); err != nil {
				return
			}
			// Pacing, not synchronization: a steady trickle of requests.
			time.Sleep(time.Millisecond)
		}
	}()
	stopRequests := sync.OnceFunc(func() { cancel(); st.Reset("done"); wg.Wait() })
	defer stopRequests()
	waitFor(t, func() bool { return accepted.Stats().BytesReceived > 64<<10 })

	clock, _ := tunneltest.Pair(t, tr)
	pings0, ticks0, downs0 := pool.Stats().PingsSent, clock.Stats().PingsSent, pool.Gateways()[0].Downs
	const intervals = 100
	waitFor(t, func() bool { return clock.Stats().PingsSent-ticks0 >= intervals })
	pings, ticks := pool.Stats().PingsSent-pings0, clock.Stats().PingsSent-ticks0
	// Each session still pings once a second for its RTT (rttPingPeriod):
	// a few over ~100 intervals, where probing would send about 100.
	if pings > ticks/4 {
		t.Errorf("the pool sent %d pings in %d probe intervals while the gateway's own session was busy, want next to none", pings, ticks)
	}
	if g := pool.Gateways()[0]; !g.Live || g.Downs != downs0 {
		t.Errorf("the gateway went dead (live %v, downs %d → %d) while it sent requests", g.Live, downs0, g.Downs)
	}
	t.Logf("%d pings in %d probe intervals beside a busy accepted session", pings, ticks)

	// When the gateway's session ends, the pool probes again and the
	// gateway stays live. (Merely idle, the session would still bring the
	// gateway's own pings, which prove it alive as well.)
	stopRequests()
	dialed.Close()
	pings1, ticks1 := pool.Stats().PingsSent, clock.Stats().PingsSent
	waitFor(t, func() bool { return pool.Stats().PingsSent-pings1 >= intervals/2 })
	if d := clock.Stats().PingsSent - ticks1; d > 4*intervals {
		t.Errorf("the pool sent %d pings in %d intervals after the requests stopped: it did not resume probing", intervals/2, d)
	}
	if !pool.Gateways()[0].Live {
		t.Error("the gateway is not live on the resumed probes")
	}
	if n := tunnel.PoolInbound(pool); n != 0 {
		t.Errorf("the pool still holds %d accepted sessions after they ended", n)
	}
}

// TestPoolAttachNeedsOneGatewayPerIP: an accepted session names its
// cluster, not its gateway; the pool maps it by remote IP only when
// exactly one member has that IP and none is given by name.
func TestPoolAttachNeedsOneGatewayPerIP(t *testing.T) {
	tr := newTLS(t, nil, nil)
	_, accepted := tunneltest.Pair(t, tr) // from 127.0.0.1
	for _, tc := range []struct {
		addrs []string
		want  bool
	}{
		{[]string{"127.0.0.1:4443", "10.0.0.2:4443"}, true},
		{[]string{"127.0.0.1:4443", "127.0.0.1:4444"}, false}, // two gateways on one IP
		{[]string{"10.0.0.1:4443", "10.0.0.2:4443"}, false},   // none has it
		{[]string{"127.0.0.1:4443", "gw-b.example:4443"}, false},
	} {
		pool, err := tunnel.NewPool(tunnel.PoolConfig{Transport: tr, Peer: "cluster-b", Addrs: tc.addrs})
		if err != nil {
			t.Fatal(err)
		}
		if got := pool.Attach(accepted); got != tc.want {
			t.Errorf("Attach with gateways %v = %v, want %v", tc.addrs, got, tc.want)
		}
		pool.Close()
	}
}

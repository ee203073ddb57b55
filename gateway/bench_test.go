package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/fabric"
	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/gateway/gatewaytest"
	"github.com/strait-net/strait/internal/testenv"
)

// BenchmarkStreamEcho1KB measures what a new client connection costs
// through two gateways on loopback: accept at the import, stream open on a
// warm session, policy at both ends, a (warm) connection to the target, and
// a 1 KB echo round trip. Loopback hides the WAN; lab experiments measure
// that.
//
// The direct sub-benchmark is the same client against the echo server
// itself, for the ratio.
func BenchmarkStreamEcho1KB(b *testing.B) {
	b.Run("direct", func(b *testing.B) { echoLoop(b, echoServer(b)) })
	b.Run("gateways", benchGateways)
}

func benchGateways(b *testing.B) {
	pair := startPair(b)
	echoLoop(b, pair.importAddr)
}

// pair is two gateways running in this process on loopback: b imports
// echo from a, whose target is a TCP echo server.
type pair struct {
	a, b       *gateway.AdminClient
	aWAN       string
	importAddr string
	metrics    map[string]string // cluster → its /metrics address
}

// startPair starts the pair and waits for b's session to a. In-process
// and on loopback, for measurements and goroutine accounting only; the
// behaviour tests run gateways as processes in namespaces.
func startPair(tb testing.TB) *pair { return startPairWith(tb, "") }

// startPairWith starts the pair on the given transport ("" is the default).
func startPairWith(tb testing.TB, transport string) *pair {
	tb.Helper()
	dir := tb.TempDir()
	if _, err := fabric.InitDir(dir, "bench", time.Hour, false); err != nil {
		tb.Fatal(err)
	}
	for _, c := range []string{"a", "b"} {
		if _, err := fabric.IssueFiles(dir, "", c, 30*time.Minute); err != nil {
			tb.Fatal(err)
		}
	}
	target := echoServer(tb)
	p := &pair{importAddr: testenv.FreeAddr(tb), metrics: map[string]string{"a": testenv.FreeAddr(tb), "b": testenv.FreeAddr(tb)}}
	start := func(cluster string) *gateway.AdminClient {
		return gatewaytest.Start(tb, gateway.Config{
			Cluster: cluster, Identity: gateway.IdentityFiles{Dir: dir}, Listen: "127.0.0.1:0",
			Admin: filepath.Join(dir, cluster+".sock"), State: filepath.Join(dir, cluster+".json"),
			Transport: transport, Metrics: p.metrics[cluster],
		})
	}
	p.a = start("a")
	mustApply(tb, p.a, exportYAML("echo", target)+allowAllYAML)
	st, err := p.a.Status()
	if err != nil {
		tb.Fatal(err)
	}
	p.aWAN = st.WAN
	p.b = start("b")
	host, port, _ := net.SplitHostPort(p.importAddr)
	var n int
	fmt.Sscan(port, &n)
	mustApply(tb, p.b, peerYAML("a", p.aWAN)+importYAML("echo", host, n, "a")+allowAllYAML)
	p.waitLive(tb)
	return p
}

const allowAllYAML = "apiVersion: strait.dev/v1alpha1\nkind: AccessPolicy\nmetadata: {name: all}\nspec: {priority: 1, action: allow}\n"

func (p *pair) waitLive(tb testing.TB) {
	tb.Helper()
	for deadline := time.Now().Add(patience); ; time.Sleep(5 * time.Millisecond) {
		st, err := p.b.Status()
		if err == nil && len(st.Peers) == 1 && len(st.Peers[0].Live) > 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no session from b to a: %+v, %v", st, err)
		}
	}
}

// echoLoop opens a connection to addr, sends 1 KB, reads it back and
// closes, once per iteration.
func echoLoop(b *testing.B, addr string) {
	msg := bytes.Repeat([]byte("0123456789abcdef"), 64)
	reply := make([]byte, len(msg))
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	if !bytes.Equal(reply, msg) {
		b.Fatal("echo differs")
	}
}

func mustApply(tb testing.TB, c *gateway.AdminClient, yaml string) {
	tb.Helper()
	res, err := c.Apply([]byte(yaml))
	if err != nil || res.Warning != "" {
		tb.Fatalf("apply: %+v, %v", res, err)
	}
}

// echoServer is a TCP echo server on loopback, closed when tb ends.
func echoServer(tb testing.TB) string {
	return relayListener(tb, func(c *net.TCPConn) {
		defer c.Close()
		_, _ = io.Copy(c, c)
	})
}

// TestSessionsDoNotLeakGoroutines reconnects b to a again and again (Peer
// deleted and applied: the pool closes its sessions and dials new ones).
// Once the old sessions ended, nothing of them may stay behind in a.
func TestSessionsDoNotLeakGoroutines(t *testing.T) {
	p := startPair(t)
	peer := peerYAML("a", p.aWAN)
	const cycles = 20
	// The pool dials its sessions (eight per gateway) one by one after the
	// first is live: count once they are all up, or a late session
	// counts as a leak.
	base := settledGoroutines()
	for range cycles {
		if _, err := p.b.Delete([]byte(peer)); err != nil {
			t.Fatal(err)
		}
		mustApply(t, p.b, peer)
		p.waitLive(t)
	}
	// Sessions end asynchronously; wait for the count to settle near the
	// start. A leak of one goroutine per accepted session (2 per cycle)
	// never gets there.
	var n int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n = runtime.NumGoroutine(); n < base+cycles/2 {
			return
		}
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("%d goroutines after %d reconnections, %d before\n%s", n, cycles, base, buf[:runtime.Stack(buf, true)])
}

// settledGoroutines is the goroutine count once it has not changed for a
// second (at most 10 s).
func settledGoroutines() int {
	n, since := runtime.NumGoroutine(), time.Now()
	for start := time.Now(); time.Since(start) < 10*time.Second && time.Since(since) < time.Second; time.Sleep(20 * time.Millisecond) {
		if m := runtime.NumGoroutine(); m != n {
			n, since = m, time.Now()
		}
	}
	return n
}

// TestTransportsCarryStreams sends echo traffic through a gateway pair on
// each transport, so the QUIC option is exercised end to end, not only the
// default.
func TestTransportsCarryStreams(t *testing.T) {
	for _, tr := range []string{gateway.TransportTLS, gateway.TransportQUIC} {
		t.Run(tr, func(t *testing.T) {
			p := startPairWith(t, tr)
			msg := bytes.Repeat([]byte("strait over "+tr+" "), 8<<10)
			c, err := net.Dial("tcp", p.importAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go func() { _, _ = c.Write(msg) }()
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, msg) {
				t.Fatal("echo through the gateways differs from what was sent")
			}
		})
	}
}

// BenchmarkKeepAliveEcho measures one request/response over an open
// connection, by payload size, directly and through the gateway pair: the
// lab's keep-alive echo cell without the lab. The writer sends the whole
// payload while the reader drains the echo, as an HTTP client would.
func BenchmarkKeepAliveEcho(b *testing.B) {
	direct := echoServer(b)
	gateways := startPair(b).importAddr
	for _, size := range []int{60, 10 << 10, 100 << 10, 1 << 20} {
		for _, path := range []struct{ name, addr string }{{"direct", direct}, {"gateways", gateways}} {
			b.Run(fmt.Sprintf("%dB/%s", size, path.name), func(b *testing.B) {
				keepAliveLoop(b, path.addr, size)
			})
		}
	}
}

func keepAliveLoop(b *testing.B, addr string, size int) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg := bytes.Repeat([]byte{0x5a}, size)
	reply := make([]byte, size)
	b.SetBytes(int64(size))
	written := make(chan error, 1)
	for b.Loop() {
		go func() { _, err := c.Write(msg); written <- err }()
		if _, err := io.ReadFull(c, reply); err != nil {
			b.Fatal(err)
		}
		if err := <-written; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKeepAliveConcurrent measures what a request costs in CPU when
// many keep-alive connections echo at once, as seed 002's fixed-rate test
// loads the gateways (10 000 requests/s of 1 KB over 100 connections):
// 100 connections each echo 1 KB in a closed loop, directly and through
// the gateway pair. cpu-µs/op is the process's CPU time (user and system:
// clients, echo server and, on the gateways path, both gateways) per
// request, so gateways minus direct is what the two gateways add; the
// per-request floor of BenchmarkKeepAliveFloor is one connection's latency
// instead, where CPU is mostly idle.
func BenchmarkKeepAliveConcurrent(b *testing.B) {
	direct := echoServer(b)
	gateways := startPair(b).importAddr
	for _, size := range []int{60, 1 << 10} {
		for _, path := range []struct{ name, addr string }{{"direct", direct}, {"gateways", gateways}} {
			b.Run(fmt.Sprintf("%dB/%s", size, path.name), func(b *testing.B) {
				concurrentLoop(b, path.addr, size, 100)
			})
		}
	}
}

// concurrentLoop echoes size bytes over conns keep-alive connections at
// once (rounded up to a multiple of GOMAXPROCS) and reports the process's
// CPU time per request.
func concurrentLoop(b *testing.B, addr string, size, conns int) {
	par := (conns + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)
	pool := make(chan net.Conn, par*runtime.GOMAXPROCS(0))
	for range cap(pool) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		pool <- c
	}
	msg := bytes.Repeat([]byte{0x5a}, size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.SetParallelism(par)
	cpu0 := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := <-pool
		reply := make([]byte, size)
		for pb.Next() {
			if _, err := c.Write(msg); err != nil {
				b.Error(err)
				return
			}
			if _, err := io.ReadFull(c, reply); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
}

// processCPU is the process's user and system CPU time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strait-net/strait/gateway"
	"github.com/strait-net/strait/load"
)

// udpEchoServer serves strait load udp's echo on a loopback port.
func udpEchoServer(tb testing.TB) string {
	tb.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = load.ServeUDPEcho(ctx, c); close(done) }()
	tb.Cleanup(func() { cancel(); <-done })
	return c.LocalAddr().String()
}

// udpImport adds a UDP export of target to the pair's a and its import on
// a free loopback port to b, and returns the import's address.
func (p *pair) udpImport(tb testing.TB, target string) string {
	tb.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	addr := c.LocalAddr().(*net.UDPAddr)
	c.Close()
	mustApply(tb, p.a, fmt.Sprintf("apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceExport\nmetadata: {name: uecho, namespace: default}\nspec:\n  ports: [{name: u, protocol: UDP, port: %d, target: %q}]\n", addr.Port, target))
	mustApply(tb, p.b, fmt.Sprintf("apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\nmetadata: {name: uecho, namespace: default}\nspec:\n  type: ClusterSetIP\n  ips: [127.0.0.1]\n  ports: [{name: u, protocol: UDP, port: %d}]\n  clusters: [{cluster: a}]\n", addr.Port))
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(addr.Port))
}

// TestTransportsCarryUDP sends UDP flows through a gateway pair on each
// transport: the datagram streams are plain streams, so QUIC carries them
// too. (The behaviour tests are TestUDP's, with processes in namespaces.)
func TestTransportsCarryUDP(t *testing.T) {
	for _, tr := range []string{gateway.TransportTLS, gateway.TransportQUIC} {
		t.Run(tr, func(t *testing.T) {
			p := startPairWith(t, tr)
			imp := p.udpImport(t, udpEchoServer(t))
			r, err := load.RunUDP(context.Background(), load.UDPConfig{Addr: imp, Rate: 500, Duration: 400 * time.Millisecond, Size: 1200, Flows: 2, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if r.Sent != 200 || r.Received != r.Sent || r.Corrupt != 0 {
				t.Fatalf("over %s: sent %d, received %d intact, %d corrupt; want all 200 back", tr, r.Sent, r.Received, r.Corrupt)
			}
		})
	}
}

// BenchmarkUDPEcho measures one datagram's round trip (64 bytes, one flow,
// one in flight) to a UDP echo directly and through the gateway pair on
// loopback: the per-datagram cost of the gateways without the WAN.
func BenchmarkUDPEcho(b *testing.B) {
	b.Run("direct", func(b *testing.B) { udpEchoLoop(b, udpEchoServer(b)) })
	b.Run("gateways", func(b *testing.B) {
		p := startPair(b)
		udpEchoLoop(b, p.udpImport(b, udpEchoServer(b)))
	})
}

func udpEchoLoop(b *testing.B, addr string) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg := load.AppendUDP(nil, load.UDPMsg{}, 64)
	buf := make([]byte, 2048)
	// The import is applied asynchronously: wait for the first echo.
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, _ = c.Write(msg)
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(buf); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("no echo")
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	for b.Loop() {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUDPImportLifecycle applies, changes and deletes a UDP import on a
// running gateway: its socket opens, moves to the new port (the old one
// closes) and closes with the import, and status lists it meanwhile.
func TestUDPImportLifecycle(t *testing.T) {
	p := startPair(t)
	echo := udpEchoServer(t)
	first := p.udpImport(t, echo)
	roundTrip := func(addr string) error {
		r, err := load.RunUDP(context.Background(), load.UDPConfig{Addr: addr, Rate: 100, Duration: 100 * time.Millisecond, Timeout: 5 * time.Second})
		if err == nil && (r.Sent != 10 || r.Received != r.Sent) {
			err = fmt.Errorf("sent %d, received %d", r.Sent, r.Received)
		}
		return err
	}
	if err := roundTrip(first); err != nil {
		t.Fatalf("import %s: %v", first, err)
	}
	second := p.udpImport(t, echo) // the same import on another port
	if err := roundTrip(second); err != nil {
		t.Fatalf("import moved to %s: %v", second, err)
	}
	st, err := p.b.Status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.UDPImports) != 1 || !strings.HasPrefix(st.UDPImports[0], "default/uecho "+second+" flows ") {
		t.Errorf("status lists %q, want only default/uecho at %s", st.UDPImports, second)
	}
	// A UDP-only port gets no TCP listener.
	for _, s := range st.Imports {
		if strings.HasPrefix(s, "default/uecho ") {
			t.Errorf("UDP-only import served over TCP too: status lists %q", s)
		}
	}
	// The old port is closed: a datagram to it is refused by the kernel.
	if !closed(t, first) {
		t.Errorf("UDP port %s still open after the import moved", first)
	}
	// The import turned TCP-only: its UDP port closes.
	_, tcpPort, _ := net.SplitHostPort(second)
	if _, err := p.b.Apply([]byte("apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\nmetadata: {name: uecho, namespace: default}\nspec: {ips: [127.0.0.1], ports: [{port: " + tcpPort + ", protocol: TCP}]}\n")); err != nil {
		t.Fatal(err)
	}
	if !closed(t, second) {
		t.Errorf("UDP port %s still open after the import lost its UDP port", second)
	}
	third := p.udpImport(t, echo) // UDP again
	if err := roundTrip(third); err != nil {
		t.Fatalf("import UDP again at %s: %v", third, err)
	}
	if _, err := p.b.Delete([]byte("apiVersion: multicluster.x-k8s.io/v1alpha1\nkind: ServiceImport\nmetadata: {name: uecho, namespace: default}\nspec: {ips: [127.0.0.1], ports: [{port: 1, protocol: UDP}]}\n")); err != nil {
		t.Fatal(err)
	}
	if !closed(t, third) {
		t.Errorf("UDP port %s still open after the import was deleted", third)
	}
}

// closed reports whether nothing listens on the UDP address: a datagram
// sent there draws an ICMP port unreachable, which the next read reports.
func closed(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 50 {
		_, _ = c.Write([]byte("anyone?"))
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Read(make([]byte, 64))
		if errors.Is(err, syscall.ECONNREFUSED) {
			return true
		}
	}
	return false
}

package packet

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/testenv"
)

// TestProberIdleWithoutTargets: a prober with no targets runs no rounds (an
// exporting-only gateway probes nobody, and a round every interval was a
// share of its CPU): what waits in its socket stays there. Given a target
// it runs them again, and the first reads the socket. The waiting part is
// a window of 100 intervals in which the old loop read the socket at every
// round; the new one can fail it only by running a round.
func TestProberIdleWithoutTargets(t *testing.T) {
	port := func() uint16 { return netip.MustParseAddrPort(testenv.FreeAddr(t)).Port() }
	p, err := NewProber(ProberConfig{Port: port(), TunnelPort: port(), Interval: time.Millisecond, Misses: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		p.Close()
	})
	c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), p.port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("not an answer")); err != nil {
		t.Fatal(err)
	}
	queued := func() int {
		n, err := unix.IoctlGetInt(p.fd, unix.SIOCINQ)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); queued() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the datagram never reached the prober's socket")
		}
	}
	time.Sleep(100 * time.Millisecond)
	if queued() == 0 {
		t.Fatal("a prober without targets read its socket: it runs rounds")
	}
	p.SetTargets([]netip.Addr{netip.MustParseAddr("127.0.0.2")})
	for deadline := time.Now().Add(10 * time.Second); queued() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("given a target, the prober ran no round that read its socket")
		}
	}
}

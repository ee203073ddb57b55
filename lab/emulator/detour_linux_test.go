package emulator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/lab/emulation"
)

// vethPair joins two fresh namespaces (named from prefix, without IPv6,
// whose router and listener solicitations would cross the links under
// test) by a veth pair a (subnet.1/24) – b (subnet.2/24), both up, and
// returns their names.
func vethPair(t *testing.T, prefix, a, b, subnet string) (nsA, nsB string) {
	t.Helper()
	testenv.RequireRoot(t)
	nsA = testenv.Netns(t, testenv.UniqueName(prefix))
	nsB = testenv.Netns(t, testenv.UniqueName(prefix))
	for _, ns := range []string{nsA, nsB} {
		testenv.Run(t, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
	}
	testenv.Run(t, "ip", "-n", nsA, "link", "add", a, "type", "veth", "peer", "name", b, "netns", nsB)
	for _, end := range []struct{ ns, dev, addr string }{{nsA, a, subnet + ".1/24"}, {nsB, b, subnet + ".2/24"}} {
		testenv.Run(t, "ip", "-n", end.ns, "addr", "add", end.addr, "dev", end.dev)
		testenv.Run(t, "ip", "-n", end.ns, "link", "set", end.dev, "up")
	}
	return nsA, nsB
}

var rttRE = regexp.MustCompile(`rtt min/avg/max/mdev = ([0-9.]+)/([0-9.]+)/([0-9.]+)`)

// pingMin pings to from netns ns and returns the smallest round trip.
func pingMin(t *testing.T, ns, to string, count int) time.Duration {
	t.Helper()
	out := testenv.Run(t, "ip", "netns", "exec", ns, "ping", "-n", "-q", "-c", strconv.Itoa(count), "-i", "0.05", "-W", "2", to)
	m := rttRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ping %s from %s: no rtt in %q", to, ns, out)
	}
	ms, _ := strconv.ParseFloat(m[1], 64)
	return time.Duration(ms * float64(time.Millisecond))
}

// TestRunVethLinkDelaysOneWay runs the emulator on a veth pair delayed
// 5 ms from B to A only (the direction a detour carries from the far end,
// so both directions' code paths are crossed): a ping's round trip is the
// one delay, the neighbour resolution goes on undelayed across the veth,
// TCP works through it (checksums and segmentation survive the TAP
// device), and when Run returns the TAP device and the programs are gone.
func TestRunVethLinkDelaysOneWay(t *testing.T) {
	nsA, nsB := vethPair(t, "stt-detour-", "va", "vb", "10.9.0")
	ready := filepath.Join(t.TempDir(), "ready")
	cfg := Config{ReadyFile: ready, Links: []Link{{
		Name: "wan", Veth: true,
		A: Endpoint{Netns: nsA, Device: "va"}, B: Endpoint{Netns: nsB, Device: "vb"},
		BtoA: emulation.Params{Delay: 5 * time.Millisecond},
	}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("emulator not ready after 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	tap := detourName("vb")
	if out := testenv.Run(t, "ip", "-n", nsB, "-o", "link", "show", "dev", tap); !strings.Contains(out, "UP") {
		t.Errorf("TAP device %s: %q, want it up", tap, out)
	}
	// Present while the emulator runs, so that their absence below means
	// something: the redirect on vb's egress, the stamps on va's ingress.
	if got := tcxPrograms(t, nsB, "vb", ebpf.AttachTCXEgress); !slices.Equal(got, []string{"strait_detour"}) {
		t.Errorf("while running, vb egress has %v, want the redirect", got)
	}
	if got := tcxPrograms(t, nsA, "va", ebpf.AttachTCXIngress); !slices.Equal(got, []string{"strait_depart"}) {
		t.Errorf("while running, va ingress has %v, want the departure stamps", got)
	}
	// The minimum of 20 is never below the delay; the ceiling only tells
	// one delay from two (10 ms) with room for a busy host.
	if rtt := pingMin(t, nsA, "10.9.0.2", 20); rtt < 5*time.Millisecond || rtt > 7500*time.Microsecond {
		t.Errorf("ping a→b: min rtt %v, want 5 ms (the one delay, not 0 and not 10)", rtt)
	} else {
		t.Logf("ping a→b: min rtt %v", rtt)
	}
	if rtt := pingMin(t, nsB, "10.9.0.1", 20); rtt < 5*time.Millisecond || rtt > 7500*time.Microsecond {
		t.Errorf("ping b→a: min rtt %v, want 5 ms", rtt)
	}
	// A TCP transfer b→a: segmentation offload packets and partial
	// checksums must come out of the TAP device whole.
	if err := tcpTransfer(nsA, "10.9.0.1:7000", nsB, 4<<20); err != nil {
		t.Errorf("TCP through the detour: %v", err)
	}
	stop()
	if out := testenv.Run(t, "ip", "-n", nsB, "-o", "link", "show"); strings.Contains(out, tap) {
		t.Errorf("after Run returned, namespace B still has %s: %s", tap, out)
	}
	for _, c := range []struct{ ns, dev string }{{nsA, "va"}, {nsB, "vb"}} {
		for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
			if got := tcxPrograms(t, c.ns, c.dev, at); len(got) > 0 {
				t.Errorf("after Run returned, %s %v still has %v", c.dev, at, got)
			}
		}
	}
	// Undelayed again once the emulator is gone.
	if rtt := pingMin(t, nsA, "10.9.0.2", 5); rtt > 2*time.Millisecond {
		t.Errorf("after Run returned: min rtt %v, want the veth's", rtt)
	}
}

// tcpTransfer sends n bytes over TCP from netns from to a listener on
// addr in netns to, and reports what went wrong.
func tcpTransfer(to, addr, from string, n int64) error {
	ln, got, err := testenv.Sink(to, addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	var c net.Conn
	if err := inNetns(from, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		return err
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.CopyN(c, zeros{}, n); err != nil {
		c.Close()
		return err
	}
	c.Close()
	select {
	case m := <-got:
		if m != n {
			return fmt.Errorf("received %d of %d bytes", m, n)
		}
	case <-time.After(20 * time.Second):
		return errors.New("receiver still reading after 20 s")
	}
	return nil
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// tcxPrograms names the programs attached to device dev in netns ns at
// tcx hook at.
func tcxPrograms(t *testing.T, ns, dev string, at ebpf.AttachType) []string {
	t.Helper()
	var names []string
	err := inNetns(ns, func() error {
		idx, err := ifIndex(dev)
		if err != nil {
			return err
		}
		res, err := link.QueryPrograms(link.QueryOptions{Target: idx, Attach: at})
		if err != nil {
			return err
		}
		for _, p := range res.Programs {
			prog, err := ebpf.NewProgramFromID(p.ID)
			if err != nil {
				return err
			}
			info, err := prog.Info()
			prog.Close()
			if err != nil {
				return err
			}
			names = append(names, info.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("programs on %s in %s: %v", dev, ns, err)
	}
	return names
}

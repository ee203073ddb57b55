package tunnel_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/testenv"
	"github.com/strait-net/strait/tunnel"
	"github.com/strait-net/strait/tunnel/tunneltest"
)

// TestCongestionStartsWithoutBBR checks every congestion control the
// transport gives its sockets, on a real connection over loopback. In the
// default mode the sockets start on strait's own (cubic where the kernel
// cannot load it) and bbr must never be set, not even to see whether the kernel has
// it: the kernel marks a socket for pacing when bbr initializes on it and
// never unmarks it, so cubic after it paced every response (keep-alive
// 10 KB echo at seed 001's cloud10: README, "Performance"). With bbr asked
// for, the sockets start on it. Either way the algorithm is set before the
// connection is established, so the namespace's default (bbr on many hosts)
// never initializes on the socket either.
func TestCongestionStartsWithoutBBR(t *testing.T) {
	avail, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil || !strings.Contains(string(avail), "bbr") || !strings.Contains(string(avail), "cubic") {
		t.Skipf("kernel lacks bbr or cubic: %q %v", avail, err)
	}
	for _, tc := range []struct {
		congestion string
		want       string
	}{
		{"", tunnel.DefaultCongestion()},
		{"bbr", "bbr"},
		{"cubic", "cubic"},
	} {
		t.Run("congestion="+tc.congestion, func(t *testing.T) {
			var mu sync.Mutex
			var set []string
			tunnel.HookCongestion(t, func(name string) {
				mu.Lock()
				set = append(set, name)
				mu.Unlock()
			})
			client, server := tunneltest.Pair(t, newTLS(t, nil, func(c *tunnel.Config) { c.Congestion = tc.congestion }))
			if cc, sc := client.Stats().Congestion, server.Stats().Congestion; cc != tc.want || sc != tc.want {
				t.Errorf("dialer %q, listener %q, want %q", cc, sc, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			// The listening socket and the dialing one, before connecting.
			if len(set) < 2 {
				t.Errorf("congestion controls set: %q, want one on the listener and one on the dialer", set)
			}
			for _, name := range set {
				if name != tc.want {
					t.Errorf("congestion controls set: %q, want only %q", set, tc.want)
					break
				}
			}
			if tc.congestion == "" && slices.Contains(set, "bbr") {
				t.Errorf("bbr was set on a socket in the default mode: the kernel paces it for good")
			}
		})
	}
}

// TestCongestionStaysWithoutLoss checks the default congestion control's
// negative half: a session starts on strait's own (cubic where the kernel
// cannot load it), and bulk over a path that loses nothing (loopback, with
// a small receive buffer that keeps the sender waiting as a slow link
// would) leaves both sides on it. The
// switch to bbr on a lossy path needs real drops: the gateway's namespace
// test (BBROnlyForLossyBulk) puts a dropping queue on the WAN.
func TestCongestionStaysWithoutLoss(t *testing.T) {
	avail, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil || !strings.Contains(string(avail), "bbr") || !strings.Contains(string(avail), "cubic") {
		t.Skipf("kernel lacks bbr or cubic: %q %v", avail, err)
	}
	// Loopback loses nothing while the receiver keeps up; a receiver
	// starved by a busy host lets its small buffer fill, the kernel drops
	// what does not fit, and the sender retransmits: then the switch is
	// right and the run proves nothing. Such runs are repeated, and every
	// run without retransmissions must stay where it started.
	want := tunnel.DefaultCongestion()
	for attempt := 1; ; attempt++ {
		cc, sc, retrans := bulkOverLoopback(t)
		if retrans == 0 {
			if cc != want || sc != want {
				t.Fatalf("after 16 MiB over loopback without a retransmission: dialer %q, listener %q, want %q on both", cc, sc, want)
			}
			return
		}
		t.Logf("attempt %d: the dialer's socket retransmitted %d segments (dialer %q, listener %q): the receiver fell behind", attempt, retrans, cc, sc)
		if attempt == 5 {
			t.Skip("every attempt met retransmissions on loopback: this host is too busy to show a loss-free path")
		}
	}
}

// bulkOverLoopback sends 16 MiB on a new session whose receive buffers are
// small, as a slow link's would be, and returns both sides' congestion
// control and the dialer's socket's retransmissions.
func bulkOverLoopback(t *testing.T) (cc, sc string, retrans uint32) {
	t.Helper()
	var raw *net.TCPConn
	client, server := tunneltest.Pair(t, newTLS(t, nil, func(c *tunnel.Config) {
		c.ReceiveBuffer = 64 << 10
		c.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				raw = conn.(*net.TCPConn)
			}
			return conn, err
		}
	}))
	if cc, sc, want := client.Stats().Congestion, server.Stats().Congestion, tunnel.DefaultCongestion(); cc != want || sc != want {
		t.Fatalf("congestion control at the start: dialer %q, listener %q, want %q", cc, sc, want)
	}
	st, err := client.OpenStream(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = st.Write(make([]byte, 16<<20))
		_ = st.CloseWrite()
	}()
	peer, err := server.AcceptStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, peer); err != nil || n != 16<<20 {
		t.Fatalf("received %d bytes, %v", n, err)
	}
	sys, err := raw.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	if cerr := sys.Control(func(fd uintptr) { info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); cerr != nil || err != nil {
		t.Fatalf("TCP_INFO: %v %v", cerr, err)
	}
	return client.Stats().Congestion, server.Stats().Congestion, info.Total_retrans
}

// TestCongestionFallsBackToCubic runs itself again in a process that may
// not load strait's congestion control (CAP_PERFMON and CAP_SYS_ADMIN
// dropped from its bounding set, as a pod without them would be): the WAN
// sockets start on cubic, and the transport says once why.
func TestCongestionFallsBackToCubic(t *testing.T) {
	if os.Getenv("STRAIT_TEST_NO_PERFMON") == "1" {
		var logs bytes.Buffer
		client, server := tunneltest.Pair(t, newTLS(t, nil, func(c *tunnel.Config) {
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		}))
		if cc, sc := client.Stats().Congestion, server.Stats().Congestion; cc != "cubic" || sc != "cubic" {
			t.Errorf("without CAP_PERFMON: dialer %q, listener %q, want cubic", cc, sc)
		}
		if n := strings.Count(logs.String(), "WAN sessions start on cubic"); n != 1 || !strings.Contains(logs.String(), "CAP_PERFMON") {
			t.Errorf("the warning came %d times, want once naming CAP_PERFMON:\n%s", n, logs.String())
		}
		return
	}
	testenv.RequireRoot(t)
	if features.HaveMapType(ebpf.StructOpsMap) != nil {
		t.Skip("the kernel has no BPF struct_ops: every process falls back")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs util-linux's setpriv to drop capabilities")
	}
	cmd := exec.Command("setpriv", "--bounding-set", "-perfmon,-sys_admin", os.Args[0], "-test.run", "^TestCongestionFallsBackToCubic$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "STRAIT_TEST_NO_PERFMON=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCongestionFallsBackToCubic") {
		t.Fatalf("setpriv %v: %v\n%s", cmd.Args[1:], err, out)
	}
}

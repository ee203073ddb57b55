package tunnel_test

import (
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

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

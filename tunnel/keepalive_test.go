package tunnel

import (
	"testing"
	"time"
)

// TestPingRule walks the keepalive decision through the cases the comment
// on pingRule names, one interval at a time.
func TestPingRule(t *testing.T) {
	const iv = 10 * time.Millisecond
	type tick struct {
		silent time.Duration // since the last frame of any kind
		heard  uint64        // frames received that were not pongs
		want   bool
	}
	cases := []struct {
		name   string
		client bool
		ticks  []tick
	}{
		{"dialer of an idle session pings every interval", true, []tick{
			// Only pongs arrive: heard never moves.
			{2 * time.Millisecond, 0, true}, {2 * time.Millisecond, 0, true}, {3 * time.Millisecond, 0, true},
		}},
		{"dialer of a busy session does not ping", true, []tick{
			{0, 5, false}, {0, 9, false}, {time.Millisecond, 40, false},
		}},
		{"dialer pings the first interval the data stops", true, []tick{
			{0, 5, false}, {iv, 5, true}, {2 * iv, 5, true}, {0, 6, false},
		}},
		{"dialer counts the peer's pings as unasked", true, []tick{
			{time.Millisecond, 1, false}, {time.Millisecond, 2, false},
		}},
		{"acceptor answers and does not ping", false, []tick{
			{iv / 2, 1, false}, {iv, 2, false}, {0, 3, false}, {2 * iv, 3, false},
		}},
		{"acceptor pings after a quarter of the timeout of silence", false, []tick{
			{200 * time.Millisecond, 0, false}, {250 * time.Millisecond, 0, true}, {260 * time.Millisecond, 0, true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := pingRule{client: c.client, interval: iv, timeout: time.Second}
			now := time.Duration(0)
			for i, tk := range c.ticks {
				now += iv
				got := r.needPing(now, tk.silent, tk.heard)
				if got != tk.want {
					t.Fatalf("tick %d (silent %v, heard %d): ping %v, want %v", i, tk.silent, tk.heard, got, tk.want)
				}
				if got {
					r.lastPing = now
				}
			}
		})
	}
}

// TestPingRuleRTTPeriod: a session that never needs a probe still pings
// every rttPingPeriod, on either side, so its RTT stays current.
func TestPingRuleRTTPeriod(t *testing.T) {
	const iv = 10 * time.Millisecond
	for _, client := range []bool{true, false} {
		r := pingRule{client: client, interval: iv, timeout: time.Second}
		pings := 0
		heard := uint64(0)
		end := 10 * rttPingPeriod
		for now := iv; now <= end; now += iv {
			heard++ // busy: something unasked every interval
			if r.needPing(now, 0, heard) {
				pings++
				r.lastPing = now
			}
		}
		if want := int(end / rttPingPeriod); pings != want {
			t.Errorf("client %v: %d pings in %v of traffic, want %d (one per %v)", client, pings, end, want, rttPingPeriod)
		}
	}
}

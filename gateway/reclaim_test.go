package gateway

import (
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strait-net/strait/internal/usage"
)

// TestReclaimTrigger feeds the trigger connections carried over
// simulated seconds: it reclaims once a burst has been over for the quiet
// time, never under a steady load or after a small peak, and at most once
// per minimum gap however often the load bursts.
func TestReclaimTrigger(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type sample struct {
		at     int // seconds after t0
		active int64
		want   bool
	}
	for _, c := range []struct {
		name    string
		samples []sample
	}{
		{"burst over", []sample{{0, 0, false}, {1, 10000, false}, {2, 10000, false}, {3, 40, false},
			{7, 40, false}, {8, 40, true}, {9, 40, false}, {60, 0, false}}},
		{"steady load", []sample{{0, 5000, false}, {10, 5000, false}, {20, 4000, false}, {40, 5000, false}, {80, 2600, false}}},
		{"small peak", []sample{{0, 200, false}, {1, 0, false}, {30, 0, false}}},
		{"back up before the quiet time", []sample{{0, 1000, false}, {1, 100, false}, {5, 100, false}, {6, 900, false},
			{7, 100, false}, {11, 100, false}, {12, 100, true}}},
		{"bursts again and again", []sample{{0, 1000, false}, {1, 0, false}, {6, 0, true}, {7, 1000, false}, {8, 0, false},
			{14, 0, false}, {35, 0, false}, {36, 0, true}, {37, 0, false}}},
	} {
		tr := newReclaimTrigger()
		for _, s := range c.samples {
			if got := tr.step(t0.Add(time.Duration(s.at)*time.Second), s.active); got != s.want {
				t.Errorf("%s: at %ds with %d carried: reclaim %v, want %v", c.name, s.at, s.active, got, s.want)
			}
		}
	}
}

// TestReclaimMemory returns memory a burst of garbage left and reports it.
func TestReclaimMemory(t *testing.T) {
	// Small objects, every page written: resident, and in spans the
	// runtime keeps after a collection.
	garbage := make([][]byte, 64<<10)
	for i := range garbage {
		garbage[i] = make([]byte, 1024)
		for j := range garbage[i] {
			garbage[i][j] = 1
		}
	}
	keep.Store(&garbage)
	// Read while the garbage is live: a collection other tests trigger
	// and the background scavenger may return some of it before the
	// reclaim does.
	held, err := usage.RSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	keep.Store(nil)
	r := reclaimMemory()
	t.Logf("RSS %d with the garbage; reclaim: %+v", held, r)
	if r.released <= 0 || r.rssAfter > held-32<<20 || r.wall <= 0 {
		t.Errorf("after dropping 64 MiB (RSS %d): %+v: want heap released and RSS down at least 32 MiB", held, r)
	}
}

var keep atomic.Pointer[[][]byte]

// TestReclaimTriggersDatagrams: a second of 20 000 UDP datagrams is a burst
// of its own, with no connections or imports: once it has been over for
// the quiet time and its flows have ended (idle timeout 2s, swept every
// 250ms), the triggers say to reclaim, naming it and its peak; a steady
// 3000 a second, under the trigger's least peak, never does.
func TestReclaimTriggersDatagrams(t *testing.T) {
	udp := UDPConfig{IdleTimeout: 2 * time.Second}
	r := newReclaimTriggers(udp)
	t0 := time.Unix(1000, 0)
	var carried uint64 = 7 // whatever was carried before the first sample
	var fired []string
	for s := range 20 {
		if s == 1 || s == 2 {
			carried += 20000
		}
		what, peak, left := r.step(t0.Add(time.Duration(s)*time.Second), 0, 0, carried)
		if what != "" {
			fired = append(fired, what)
			// Quiet from second 3, for 5s + 2s + 250ms: second 11.
			if what != "UDP datagrams a second" || peak != 20000 || left != 0 || s != 11 {
				t.Errorf("second %d: reclaim after %q, peak %d, now %d; want UDP datagrams a second, peak 20000, now 0, at second 11", s, what, peak, left)
			}
		}
	}
	if len(fired) != 1 {
		t.Errorf("reclaims %q, want one", fired)
	}
	r = newReclaimTriggers(udp)
	for s := range 60 {
		carried += 3000
		if what, _, _ := r.step(t0.Add(time.Duration(s)*time.Second), 0, 0, carried); what != "" {
			t.Fatalf("second %d of a steady 3000/s: reclaim after %q", s, what)
		}
	}
}

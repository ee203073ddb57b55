package emulation

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRateOnly(t *testing.T) {
	for _, c := range []struct {
		p    Params
		want bool
	}{
		{Params{Rate: 1e8}, true},
		{Params{Rate: 1e8, Limit: 50, Reorder: true}, true},
		{Params{}, false},
		{Params{Rate: 1e8, Delay: time.Millisecond}, false},
		{Params{Rate: 1e8, Jitter: time.Millisecond}, false},
		{Params{Rate: 1e8, Loss: 0.1}, false},
	} {
		if got := c.p.RateOnly(); got != c.want {
			t.Errorf("%v: RateOnly = %v, want %v", c.p, got, c.want)
		}
	}
}

func TestTBFArgs(t *testing.T) {
	// 100 Mbit/s: 2 ms of line is 25 000 B; 1000 packets of queue
	// (QueueLimit's floor) drain in 120 ms.
	p := Params{Rate: 100_000_000}
	if got, want := p.TBFArgs(), []string{"rate", "100000000bit", "burst", "25000", "limit", "1500000"}; !slices.Equal(got, want) {
		t.Errorf("TBFArgs = %v, want %v", got, want)
	}
	if got := p.TBFQueueTime(); got != 120*time.Millisecond {
		t.Errorf("TBFQueueTime = %v, want 120ms", got)
	}
	// 10 Gbit/s: the queue is DefaultBuffer of line time.
	p = Params{Rate: 10_000_000_000}
	if got := p.TBFQueueTime().Round(time.Millisecond); got != DefaultBuffer {
		t.Errorf("10gbit: TBFQueueTime = %v, want %v", got, DefaultBuffer)
	}
	// 1 Mbit/s: the bucket still holds ten full frames; a set limit wins.
	p = Params{Rate: 1_000_000, Limit: 20}
	if p.TBFBurst() != 10*1514 || p.TBFLimit() != 30_000 {
		t.Errorf("1mbit limit 20: burst %d limit %d, want %d and 30000", p.TBFBurst(), p.TBFLimit(), 10*1514)
	}
}

func TestTBFArgsMTU(t *testing.T) {
	p := Params{Rate: 100_000_000}
	if got := p.TBFArgsMTU(1500); strings.Join(got, " ") != strings.Join(p.TBFArgs(), " ") {
		t.Errorf("MTU 1500: %v, want TBFArgs %v", got, p.TBFArgs())
	}
	// Ten 9014-byte frames exceed the 25 000-byte bucket of 2 ms at 100 Mbit/s.
	if got := p.TBFArgsMTU(9000); got[3] != "90140" {
		t.Errorf("MTU 9000: burst %s, want 90140 (ten frames)", got[3])
	}
}

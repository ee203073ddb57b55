package tunnel

import (
	"testing"
	"time"
)

// TestLossyBulkRule checks the cubic→bbr switch rule at its edges. The
// request/response rows are what a keep-alive echo leaves in a socket whose
// window a loss shrank: under the earlier rule (any unsent byte) they
// switched, and bbr then paced every response.
func TestLossyBulkRule(t *testing.T) {
	const (
		lowWater = 1 << 20 // Config.NotSentLowWater's default
		mss      = 1448
		open     = 4 << 20 // a peer window that limits nothing
	)
	for _, tc := range []struct {
		name     string
		retrans0 uint32
		st       sockState
		lowWater int
		want     bool
	}{
		{"10 KB response behind a window of 4 segments", 3, sockState{4, 10000 - 4*mss, 4 * mss, open}, lowWater, false},
		{"a byte behind a loss", 0, sockState{1, 1, 2 * mss, open}, lowWater, false},
		{"100 KB response behind a window of 20 segments", 3, sockState{9, 100000 - 20*mss, 20 * mss, open}, lowWater, true},
		{"bulk stalled at the stream window", 3, sockState{4, 256<<10 - 20*mss, 20 * mss, open}, lowWater, true},
		{"bulk stalled at the low-water mark", 3, sockState{4, lowWater, 20 * mss, open}, lowWater, true},
		{"backlog at the threshold", 0, sockState{1, bulkBacklog, 20 * mss, open}, lowWater, true},
		{"backlog just under the threshold", 0, sockState{1, bulkBacklog - 1, 20 * mss, open}, lowWater, false},
		{"bulk without loss", 7, sockState{7, lowWater, 20 * mss, open}, lowWater, false},
		{"fewer than at the last look (duplicates reported)", 5, sockState{4, lowWater, 20 * mss, open}, lowWater, false},
		{"retransmission counter wrapped", 1<<32 - 1, sockState{2, lowWater, 20 * mss, open}, lowWater, true},
		{"the peer's window holds it back", 3, sockState{9, lowWater, 400 * mss, 64 << 10}, lowWater, false},
		{"windows equal", 3, sockState{9, lowWater, 64 << 10, 64 << 10}, lowWater, false},
		{"low-water mark under twice the threshold", 0, sockState{1, 32 << 10, 20 * mss, open}, 64 << 10, true},
		{"low-water mark under twice the threshold, smaller backlog", 0, sockState{1, 32<<10 - 1, 20 * mss, open}, 64 << 10, false},
		{"low-water mark unset", 0, sockState{1, bulkBacklog, 20 * mss, open}, -1, true},
		{"low-water mark of 1 byte, nothing unsent", 0, sockState{1, 0, 2 * mss, open}, 1, false},
		{"nothing unsent", 0, sockState{5, 0, 2 * mss, open}, lowWater, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lossyBulk(tc.retrans0, 0, tc.st, tc.lowWater); got != tc.want {
				t.Errorf("lossyBulk(%d, %+v, %d) = %v, want %v", tc.retrans0, tc.st, tc.lowWater, got, tc.want)
			}
		})
	}
}

// TestLossyBulkRuleStaleEvidence: retransmissions counted since a look more
// than bulkEvidenceAge ago do not switch a session (they may be an earlier,
// lossy stretch's), however bulky the transfer now.
func TestLossyBulkRuleStaleEvidence(t *testing.T) {
	st := sockState{retrans: 9, notsent: 100000, cwnd: 20 * 1448, peerWindow: 4 << 20}
	for _, tc := range []struct {
		sinceLook time.Duration
		want      bool
	}{
		{0, true},
		{bulkEvidenceAge, true},
		{bulkEvidenceAge + time.Millisecond, false},
		{time.Hour, false},
	} {
		if got := lossyBulk(3, tc.sinceLook, st, 1<<20); got != tc.want {
			t.Errorf("lossyBulk with the last look %v ago = %v, want %v", tc.sinceLook, got, tc.want)
		}
	}
}

package tunnel

import "testing"

// TestLossyBulkRule checks the cubic→bbr switch rule at its edges. The
// request/response rows are what a keep-alive echo leaves in a socket whose
// window a loss shrank: under the earlier rule (any unsent byte) they
// switched, and bbr then paced every response.
func TestLossyBulkRule(t *testing.T) {
	const lowWater = 1 << 20 // Config.NotSentLowWater's default
	for _, tc := range []struct {
		name              string
		retrans0, retrans uint32
		notsent           uint32
		lowWater          int
		want              bool
	}{
		{"10 KB response behind a window of 4 segments", 3, 4, 10000 - 4*1448, lowWater, false},
		{"a byte behind a loss", 0, 1, 1, lowWater, false},
		{"100 KB response behind a window of 20 segments", 3, 9, 100000 - 20*1448, lowWater, true},
		{"bulk stalled at the stream window", 3, 4, 256<<10 - 20*1448, lowWater, true},
		{"bulk stalled at the low-water mark", 3, 4, lowWater, lowWater, true},
		{"backlog at the threshold", 0, 1, bulkBacklog, lowWater, true},
		{"backlog just under the threshold", 0, 1, bulkBacklog - 1, lowWater, false},
		{"bulk without loss", 7, 7, lowWater, lowWater, false},
		{"bulk, retransmission counter wrapped", 1<<32 - 1, 2, lowWater, lowWater, true},
		{"low-water mark under twice the threshold", 0, 1, 32 << 10, 64 << 10, true},
		{"low-water mark under twice the threshold, smaller backlog", 0, 1, 32<<10 - 1, 64 << 10, false},
		{"low-water mark unset", 0, 1, bulkBacklog, -1, true},
		{"low-water mark of 1 byte, nothing unsent", 0, 1, 0, 1, false},
		{"nothing unsent", 0, 5, 0, lowWater, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lossyBulk(tc.retrans0, tc.retrans, tc.notsent, tc.lowWater); got != tc.want {
				t.Errorf("lossyBulk(%d, %d, %d, %d) = %v, want %v", tc.retrans0, tc.retrans, tc.notsent, tc.lowWater, got, tc.want)
			}
		})
	}
}

package tunnel

import "testing"

// TestLossyBulkRule checks the cubic→bbr switch rule at its edges. The
// request/response rows are what a keep-alive echo leaves in a socket whose
// window a loss shrank: under the earlier rule (any unsent byte) they
// switched, and bbr then paced every response.
func TestLossyBulkRule(t *testing.T) {
	const (
		lowWater = 1 << 20 // Config.NotSentLowWater's default
		mss      = 1448
	)
	for _, tc := range []struct {
		name              string
		retrans0, retrans uint32
		notsent, window   uint32
		lowWater          int
		want              bool
	}{
		{"10 KB response behind a window of 4", 3, 4, 10000 - 4*mss, 4 * mss, lowWater, false},
		{"two 1 KB responses behind a window of 1", 3, 4, 2000 - mss, mss, lowWater, false},
		{"a byte behind a loss", 0, 1, 1, 2 * mss, lowWater, false},
		{"bulk stalled at the stream window, window of 20", 3, 4, 256<<10 - 20*mss, 20 * mss, lowWater, true},
		{"bulk stalled at the low-water mark, large window", 3, 4, lowWater, 300 << 10, lowWater, true},
		{"backlog at four windows", 0, 1, 4 * 20 * mss, 20 * mss, lowWater, true},
		{"backlog just under four windows", 0, 1, 4*20*mss - 1, 20 * mss, lowWater, false},
		{"backlog at the minimum, small window", 0, 1, bulkMinBacklog, 2 * mss, lowWater, true},
		{"backlog just under the minimum, small window", 0, 1, bulkMinBacklog - 1, 2 * mss, lowWater, false},
		{"bulk without loss", 7, 7, lowWater, 20 * mss, lowWater, false},
		{"bulk, retransmission counter wrapped", 1<<32 - 1, 2, lowWater, 20 * mss, lowWater, true},
		{"low-water mark below the backlog asked for", 0, 1, 64 << 10, 100 * mss, 128 << 10, true},
		{"low-water mark below it, smaller backlog", 0, 1, 64<<10 - 1, 100 * mss, 128 << 10, false},
		{"low-water mark unset", 0, 1, 4 * 100 * mss, 100 * mss, -1, true},
		{"low-water mark of 1 byte, nothing unsent", 0, 1, 0, 2 * mss, 1, false},
		{"nothing unsent", 0, 5, 0, 2 * mss, lowWater, false},
		{"window unknown (0)", 0, 1, bulkMinBacklog, 0, lowWater, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lossyBulk(tc.retrans0, tc.retrans, tc.notsent, tc.window, tc.lowWater); got != tc.want {
				t.Errorf("lossyBulk(%d, %d, %d, %d, %d) = %v, want %v", tc.retrans0, tc.retrans, tc.notsent, tc.window, tc.lowWater, got, tc.want)
			}
		})
	}
}

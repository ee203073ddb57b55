package tunnel

import "testing"

// TestPlacement checks the order in which a new stream tries a gateway's
// sessions: the least loaded first, the first in slot order on a tie, each
// once; and the key's rotation for sessions that do not count their
// streams.
func TestPlacement(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		loads []int
		key   uint64
		want  []int // the order of tries, then -1
	}{
		{"idle sessions: the first", 4, []int{0, 0, 0, 0}, 7, []int{0, 1, 2, 3, -1}},
		{"least loaded first", 4, []int{3, 1, 2, 1}, 0, []int{1, 3, 2, 0, -1}},
		{"the key plays no part when loads are known", 3, []int{5, 0, 5}, 2, []int{1, 0, 2, -1}},
		{"one session", 1, []int{9}, 3, []int{0, -1}},
		{"no live session", 0, []int{}, 3, []int{-1}},
		{"uncounted: the key picks the first", 4, nil, 6, []int{2, 3, 0, 1, -1}},
		{"uncounted, key 0", 3, nil, 0, []int{0, 1, 2, -1}},
		{"uncounted, a large key", 2, nil, 1<<64 - 1, []int{1, 0, -1}},
		{"sixteen sessions", 16, []int{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1}, 0, []int{15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tried uint32
			var got []int
			for range tc.n + 1 {
				i := placement(tc.n, tc.loads, tc.key, tried)
				got = append(got, i)
				if i < 0 {
					break
				}
				tried |= 1 << i
			}
			if len(got) != len(tc.want) {
				t.Fatalf("tries %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("tries %v, want %v", got, tc.want)
				}
			}
		})
	}
}

package gateway

import "testing"

// TestShrink: a map keeps its table until it has shrunk to a quarter of
// its peak, then comes back as a copy of the same entries; small maps are
// never copied.
func TestShrink(t *testing.T) {
	var p mapPeak
	m := map[int]int{}
	for i := range 4000 {
		m[i] = i
	}
	if got := shrink(m, &p); p.peak != 4000 || !same(got, m) {
		t.Fatalf("growing: peak %d, want 4000 and the map itself", p.peak)
	}
	for i := range 2999 {
		delete(m, i)
	}
	if got := shrink(m, &p); !same(got, m) {
		t.Fatal("1001 of a peak of 4000: copied, want kept")
	}
	delete(m, 2999)
	got := shrink(m, &p)
	if same(got, m) || len(got) != 1000 || p.peak != 1000 {
		t.Fatalf("1000 of a peak of 4000: same map %v, %d entries, peak %d; want a copy of 1000, peak 1000", same(got, m), len(got), p.peak)
	}
	for k, v := range m {
		if got[k] != v {
			t.Fatalf("copy has %d → %d, want %d", k, got[k], v)
		}
	}
	var small mapPeak
	s := map[int]int{}
	for i := range shrinkMinPeak - 1 {
		s[i] = i
	}
	shrink(s, &small)
	clear(s)
	if got := shrink(s, &small); !same(got, s) {
		t.Fatalf("emptied map of a peak of %d: copied, want kept", shrinkMinPeak-1)
	}
}

// same reports whether a and b are one map: a write to one shows in the
// other.
func same(a, b map[int]int) bool {
	a[-1] = 1
	_, ok := b[-1]
	delete(a, -1)
	return ok
}

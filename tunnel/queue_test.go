package tunnel

import "testing"

// TestWriteQueueReusesItsArray holds the writer's queues to no
// allocation per frame when frames come one at a time, as a new stream's
// open, data and FIN do: popping by reslicing alone allocated nearly
// every time.
func TestWriteQueueReusesItsArray(t *testing.T) {
	var q []*writeReq
	a, b := &writeReq{}, &writeReq{}
	allocs := testing.AllocsPerRun(100, func() {
		q = append(q, a)
		if popFront(&q) != a {
			t.Fatal("popped another request")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per frame, want 0", allocs)
	}
	// First in, first out, across the array's reuse.
	q = append(q, a, b)
	if popFront(&q) != a || popFront(&q) != b || len(q) != 0 {
		t.Errorf("queue order broken: %v left", len(q))
	}
}

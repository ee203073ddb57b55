package gateway

import (
	"errors"
	"testing"
	"time"
)

// fakeFlowMap is a flowMapUser whose count the test sets, counting walks.
type fakeFlowMap struct {
	entries, size, walks int
	err                  error
}

func (f *fakeFlowMap) FlowMapUse() (int, int, error) {
	f.walks++
	return f.entries, f.size, f.err
}

// TestFlowMapCount: a count serves the reads of the next flowMapRefresh,
// then the map is walked again; a failed walk is not kept, and another
// map is counted afresh.
func TestFlowMapCount(t *testing.T) {
	clock := time.Unix(1000, 0)
	c := flowMapCount{now: func() time.Time { return clock }}
	m := &fakeFlowMap{entries: 3, size: 16}
	read := func(m flowMapUser, wantEntries, wantWalks int, wantErr bool) {
		t.Helper()
		n, size, err := c.read(m)
		if (err != nil) != wantErr {
			t.Fatalf("read at %v: err %v, want error %v", clock, err, wantErr)
		}
		if err == nil && (n != wantEntries || size != 16) {
			t.Errorf("read at %v = %d of %d, want %d of 16", clock, n, size, wantEntries)
		}
		if f := m.(*fakeFlowMap); f.walks != wantWalks {
			t.Errorf("read at %v: %d walks, want %d", clock, f.walks, wantWalks)
		}
	}
	read(m, 3, 1, false) // nothing counted yet
	m.entries = 9
	clock = clock.Add(flowMapRefresh - time.Nanosecond)
	read(m, 3, 1, false) // the count serves
	clock = clock.Add(time.Nanosecond)
	read(m, 9, 2, false) // flowMapRefresh old: walked again
	read(m, 9, 2, false)

	m.err = errors.New("flows: boom")
	clock = clock.Add(flowMapRefresh)
	read(m, 0, 3, true)
	m.err = nil
	read(m, 9, 4, false) // the failure was not kept

	other := &fakeFlowMap{entries: 5, size: 16}
	read(other, 5, 1, false) // another map (the programs loaded again)
}

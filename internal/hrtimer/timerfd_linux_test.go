package hrtimer

import (
	"context"
	"testing"
	"time"
)

// An expiry nobody read (a wait that ended otherwise) must not end the next
// wait early: arming the timer resets its expiration count.
func TestRearmingDropsAnEarlierExpiry(t *testing.T) {
	tm := newTimer(t, context.Background())
	if err := tm.Wait(time.Now().Add(time.Microsecond)); err != nil {
		t.Fatal(err)
	}
	// Arm a short wait, let it expire unread, then wait longer.
	tm.spec.Value.Nsec = 1000
	if err := tm.rc.Control(tm.armFn); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	deadline := time.Now().Add(5 * time.Millisecond)
	if err := tm.Wait(deadline); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(deadline) {
		t.Fatal("a stale expiry ended the wait early")
	}
}

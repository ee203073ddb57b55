package hrtimer

import (
	"context"
	"errors"
	"syscall"
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

// A timer the kernel fails to arm still waits until the deadline, on the
// runtime's timer, and a cancel still ends that wait.
func TestFailedArmWaitsOnTheRuntimesTimer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tm := newTimer(t, ctx)
	tm.armFn = func(uintptr) { tm.armErr = syscall.EINVAL }
	deadline := time.Now().Add(5 * time.Millisecond)
	if err := tm.Wait(deadline); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(deadline) {
		t.Fatal("the wait ended before its deadline")
	}
	done := make(chan error, 1)
	go func() { done <- tm.Wait(time.Now().Add(time.Hour)) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait after cancel: %v, want context.Canceled", err)
	}
}

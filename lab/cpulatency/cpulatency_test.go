package cpulatency_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/strait-net/strait/lab/cpulatency"
)

func TestCheck(t *testing.T) {
	for _, ok := range []time.Duration{0, time.Microsecond, 20 * time.Microsecond, cpulatency.Max} {
		if err := cpulatency.Check(ok); err != nil {
			t.Errorf("Check(%v): %v", ok, err)
		}
	}
	for _, bad := range []time.Duration{-time.Microsecond, cpulatency.Max + time.Microsecond, 1500 * time.Nanosecond} {
		if err := cpulatency.Check(bad); err == nil {
			t.Errorf("Check(%v) passed", bad)
		}
		if _, err := cpulatency.Start(bad); err == nil {
			t.Errorf("Start(%v) passed", bad)
		}
	}
}

// TestHold: a held limit is the host's while the hold lasts (the kernel's
// own aggregate, read back from the device), and gone after Release; a
// second Release is harmless. Limits other requests on the host ask for
// are respected: the test holds a limit below any a tuning daemon sets.
func TestHold(t *testing.T) {
	before, err := cpulatency.Current()
	if errors.Is(err, cpulatency.ErrUnsupported) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the CPU latency QoS device is root's")
	}
	for _, limit := range []time.Duration{7 * time.Microsecond, 0} {
		if limit >= before {
			continue // another request already holds the host lower
		}
		h, err := cpulatency.Start(limit)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := cpulatency.Current(); err != nil || got != limit {
			t.Errorf("held %v: the host's limit is %v (%v)", limit, got, err)
		}
		if h.Limit() != limit {
			t.Errorf("Limit() %v, want %v", h.Limit(), limit)
		}
		if err := h.Release(); err != nil {
			t.Fatal(err)
		}
		if err := h.Release(); err != nil {
			t.Errorf("second Release: %v", err)
		}
		if got, err := cpulatency.Current(); err != nil || got != before {
			t.Errorf("released %v: the host's limit is %v (%v), want %v again", limit, got, err, before)
		}
	}
}

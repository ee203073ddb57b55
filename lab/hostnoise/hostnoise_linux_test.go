package hostnoise

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestBadConfigIsNamed(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Interval: 10 * time.Microsecond}, "interval 10µs"},
		{Config{Interval: time.Second, Duration: time.Millisecond}, "duration 1ms"},
		{Config{Late: -time.Millisecond}, "late -1ms"},
		{Config{CPUs: []int{1 << 20}}, "cpu 1048576: not one this process may run on"},
		{Config{CPUs: []int{0, 0}}, "cpu 0: given twice"},
	} {
		_, err := Measure(context.Background(), tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Measure(%+v) = %v; want an error naming %q", tt.cfg, err, tt.want)
		}
	}
}

func TestEveryCPUIsProbed(t *testing.T) {
	cfg := Config{Duration: 100 * time.Millisecond}
	res, err := Measure(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.CPUs) != runtime.NumCPU() {
		t.Fatalf("%d CPUs probed; want %d", len(res.CPUs), runtime.NumCPU())
	}
	for i, c := range res.CPUs {
		if c.CPU != i {
			t.Errorf("row %d is CPU %d", i, c.CPU)
		}
		// A wake-up per interval at most: a late one skips the ticks it
		// missed instead of catching up.
		if c.Wakeups < 1 || c.Wakeups > int(cfg.Duration/DefaultInterval) {
			t.Errorf("CPU %d: %d wake-ups in %v at %v", c.CPU, c.Wakeups, cfg.Duration, DefaultInterval)
		}
		if c.Late > c.Wakeups || c.Worst < 0 || (c.Late > 0) != (c.Lost > 0) {
			t.Errorf("CPU %d: inconsistent %+v", c.CPU, c)
		}
	}
	var out bytes.Buffer
	if err := res.Table(&out); err != nil || strings.Count(out.String(), "\n") != len(res.CPUs)+1 {
		t.Errorf("table (%v):\n%s", err, out.String())
	}
}

// TestAStalledCPUIsSeen holds CPU 0 with a real-time thread that spins for
// 30 ms: the probe pinned there cannot run meanwhile, and must report it.
func TestAStalledCPUIsSeen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a SCHED_FIFO thread stalls the CPU")
	}
	const spin = 30 * time.Millisecond
	stalled := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var set unix.CPUSet
		set.Set(0)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			stalled <- err
			return
		}
		time.Sleep(100 * time.Millisecond) // the probe is running by now
		attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: 1 /* SCHED_FIFO */, Priority: 1}
		if err := unix.SchedSetAttr(0, &attr, 0); err != nil {
			stalled <- err
			return
		}
		for end := time.Now().Add(spin); time.Now().Before(end); {
		}
		stalled <- nil
	}()
	res, err := Measure(context.Background(), Config{Duration: 400 * time.Millisecond, CPUs: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-stalled; errors.Is(err, unix.EPERM) {
		t.Skipf("a SCHED_FIFO thread needs CAP_SYS_NICE: %v", err)
	} else if err != nil {
		t.Fatalf("stalling CPU 0: %v", err)
	}
	c := res.CPUs[0]
	if c.Late < 1 || c.Worst < spin/2 {
		t.Errorf("CPU 0 held for %v: probe saw %d late wake-ups, worst %v", spin, c.Late, c.Worst)
	}
}

func TestCancelEndsTheMeasurement(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := Measure(ctx, Config{Duration: time.Hour})
	if err != context.Canceled {
		t.Fatalf("Measure after cancel = %v; want context.Canceled", err)
	}
	for _, c := range res.CPUs {
		if c.Wakeups != 0 {
			t.Errorf("CPU %d woke %d times after the cancel", c.CPU, c.Wakeups)
		}
	}
}

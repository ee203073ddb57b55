package hostnoise

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}

// monotonic is CLOCK_MONOTONIC, the clock sleepUntil's deadlines are on.
func monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // cannot fail for this clock
	return time.Duration(ts.Nano())
}

// sleepUntil sleeps on the kernel's high-resolution timer until the
// absolute deadline t; the Go runtime's timers wake up to a millisecond
// late in an idle process, which is what this package measures in others.
func sleepUntil(t time.Duration) error {
	ts := unix.NsecToTimespec(int64(t))
	for {
		err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

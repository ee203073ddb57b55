package procs

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPUTime is the CPU time of all the process's threads, user and
// system, to the nanosecond; -1 when it cannot be read.
func processCPUTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return -1
	}
	return time.Duration(ts.Nano())
}

//go:build !linux

package procs

import (
	"syscall"
	"time"
)

// processCPUTime is the CPU time of the process, user and system; -1 when
// it cannot be read.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

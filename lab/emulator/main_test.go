package emulator

import (
	"os"
	"runtime"
	"testing"
)

func TestMain(m *testing.M) {
	if probeRole() {
		return // probeRole exits
	}
	// As in the daemon: the writers' locked threads hold Ps while they
	// sleep in nanosleep, and must not starve the readers.
	runtime.GOMAXPROCS(runtime.NumCPU() + 4)
	os.Exit(m.Run())
}

//go:build !linux

package hostnoise

import (
	"errors"
	"time"
)

var errUnsupported = errors.New("hostnoise: needs Linux (CPU affinity and absolute clock_nanosleep)")

func allowedCPUs() ([]int, error) { return nil, errUnsupported }
func pin(int) error               { return errUnsupported }
func monotonic() time.Duration    { return 0 }
func sleepUntil(time.Duration) error {
	return errUnsupported
}

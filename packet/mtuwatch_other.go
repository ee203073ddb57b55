//go:build !linux

package packet

import (
	"context"
	"errors"
)

// WatchMTU needs Linux's link notifications.
func WatchMTU(context.Context, func()) error {
	return errors.New("watch links' MTU: Linux only")
}

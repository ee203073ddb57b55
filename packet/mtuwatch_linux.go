package packet

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// WatchMTU calls changed whenever a link of the caller's network namespace
// gets another MTU (the kernel's link notifications), until ctx ends, so
// that a gateway sizing its programs by its routes follows a changed link
// at once rather than at its next sync. A link appearing or going is not a
// change: a route that moves to it is found by the next sync.
func WatchMTU(ctx context.Context, changed func()) error {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer func() {
		close(done)
		go func() { // the subscription closes updates once its socket is
			for range updates {
			}
		}()
	}()
	failed := make(chan error, 1)
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ListExisting: true,
		ErrorCallback: func(err error) {
			select {
			case failed <- err:
			default:
			}
		},
	}); err != nil {
		return fmt.Errorf("watch links' MTU: %w", err)
	}
	mtus := map[int32]int{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return fmt.Errorf("watch links' MTU: %w", err)
		case u, ok := <-updates:
			if !ok {
				return errors.New("watch links' MTU: the kernel's notifications ended")
			}
			if u.Header.Type != unix.RTM_NEWLINK {
				delete(mtus, u.Index)
				continue
			}
			mtu := u.Attrs().MTU
			old, known := mtus[u.Index]
			mtus[u.Index] = mtu
			if known && old != mtu {
				changed()
			}
		}
	}
}

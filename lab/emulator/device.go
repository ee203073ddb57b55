package emulator

import (
	"errors"
	"os"
)

// Headroom is the number of bytes the engine leaves in front of every
// packet it passes to Device.Write, and the offset it passes to
// Device.Read. A TUN device with IFF_VNET_HDR needs 10 of them for the
// virtio header it prepends; the rest keeps the packet aligned.
const Headroom = 16

// Device is one end of an emulated link as the engine sees it: the engine
// reads the packets the namespace sends into the link and writes the packets
// the namespace receives from it. It is the part of wireguard-go's
// tun.Device the engine needs, so a *tun.NativeTun satisfies it, and
// MemDevice is an in-memory stand-in for tests.
//
// Contract:
//   - Read blocks until at least one packet is available, then fills
//     bufs[i][offset:] with whole IP packets, sets sizes[i] to their lengths
//     and returns how many it filled (at most len(bufs)). A segmentation
//     offload super-packet is returned as the MTU-sized packets it stands
//     for, so the engine can drop them one by one. len(bufs) must be at
//     least BatchSize(); each buffer must hold offset+MTU bytes.
//   - Write writes bufs[i][offset:] as one packet each, in order, and may
//     coalesce consecutive packets of one flow. To do so it may grow bufs[i]
//     up to its capacity, overwrite bufs[i][:offset] and exchange the slices
//     between indexes; when it returns the caller owns every buffer again.
//     offset must be at least Headroom.
//   - Read and Write may be called concurrently with each other, but each by
//     one goroutine at a time.
//   - After Close, blocked and later calls return an error that wraps
//     os.ErrClosed. Close is idempotent.
type Device interface {
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	Write(bufs [][]byte, offset int) (n int, err error)
	BatchSize() int
	Close() error
}

// errClosed reports whether err means the device is gone.
func errClosed(err error) bool {
	return errors.Is(err, os.ErrClosed)
}

package emulator

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// MemDevice is a Device in memory, for tests of the engine: the test plays
// the namespace, putting packets into the link with Send and taking the ones
// that came out with Recv. It never coalesces or splits.
type MemDevice struct {
	in        chan []byte
	out       chan Received
	closed    chan struct{}
	closeOnce sync.Once
	batch     int
}

// Received is a packet that left the link, with the time Write was called.
type Received struct {
	Data []byte
	At   time.Time
}

// NewMemDevice returns a device whose Send and Recv sides each buffer up to
// queue packets.
func NewMemDevice(queue int) *MemDevice {
	return &MemDevice{
		in:     make(chan []byte, queue),
		out:    make(chan Received, queue),
		closed: make(chan struct{}),
		batch:  128,
	}
}

// Send hands pkt to the engine as if the namespace had routed it into the
// link. It blocks while the engine is behind, and fails once the device is
// closed.
func (d *MemDevice) Send(pkt []byte) error {
	select {
	case d.in <- pkt:
		return nil
	case <-d.closed:
		return os.ErrClosed
	}
}

// Recv returns the channel of packets the engine wrote to this device.
func (d *MemDevice) Recv() <-chan Received { return d.out }

// Read implements Device.
func (d *MemDevice) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	var p []byte
	select {
	case p = <-d.in:
	case <-d.closed:
		return 0, os.ErrClosed
	}
	n := 0
	for {
		if len(p) > len(bufs[n])-offset {
			return n, fmt.Errorf("packet of %d bytes exceeds buffer of %d", len(p), len(bufs[n])-offset)
		}
		sizes[n] = copy(bufs[n][offset:], p)
		n++
		if n == len(bufs) {
			return n, nil
		}
		select {
		case p = <-d.in:
		default:
			return n, nil
		}
	}
}

// Write implements Device. It blocks while Recv's buffer is full, like a
// namespace whose socket buffers are full would drop; tests size the buffer
// so that does not happen.
func (d *MemDevice) Write(bufs [][]byte, offset int) (int, error) {
	now := time.Now()
	for i, b := range bufs {
		p := append([]byte(nil), b[offset:]...)
		select {
		case d.out <- Received{Data: p, At: now}:
		case <-d.closed:
			return i, os.ErrClosed
		}
	}
	return len(bufs), nil
}

// BatchSize implements Device.
func (d *MemDevice) BatchSize() int { return d.batch }

// Close implements Device.
func (d *MemDevice) Close() error {
	d.closeOnce.Do(func() { close(d.closed) })
	return nil
}

package hrtimer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/strait-net/strait/internal/rawsock"
)

// Timer is a one-shot timer whose waits end early when its context ends.
// Close releases it.
type Timer struct {
	ctx  context.Context
	stop func() bool
	f    *os.File
	rc   syscall.RawConn

	// The callbacks are bound once, so that a wait allocates nothing.
	armFn  func(fd uintptr)
	spec   unix.ItimerSpec
	armErr syscall.Errno
	readFn func(fd uintptr) bool
	buf    [8]byte
	rerr   error
}

// New returns a Timer whose waits end when ctx ends.
func New(ctx context.Context) (*Timer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("hrtimer: timerfd_create: %w", err)
	}
	// A non-blocking descriptor makes the os.File wait in the runtime's
	// poller, where a read deadline interrupts the wait.
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("hrtimer: %w", err)
	}
	t := &Timer{ctx: ctx, f: f, rc: rc}
	t.armFn, t.readFn = t.armOnce, t.readOnce
	t.stop = context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
	return t, nil
}

// Close releases the timer; a wait in progress returns an error.
func (t *Timer) Close() error {
	t.stop()
	return t.f.Close()
}

func (t *Timer) wait(d time.Duration) error {
	deadline := time.Now().Add(d)
	t.spec.Value = unix.NsecToTimespec(int64(d))
	t.armErr = 0
	if err := t.rc.Control(t.armFn); err != nil {
		return t.done(fmt.Errorf("hrtimer: %w", err))
	}
	if t.armErr != 0 {
		return t.sleepUntil(deadline)
	}
	t.rerr = nil
	err := t.rc.Read(t.readFn)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// Only the context's end sets a deadline.
		return t.done(err)
	case err != nil:
		return t.done(fmt.Errorf("hrtimer: %w", err))
	case t.rerr != nil:
		return t.sleepUntil(deadline)
	}
	return nil
}

// done is what a wait cut short returns: the context's error once it has
// ended.
func (t *Timer) done(err error) error {
	if cerr := t.ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// sleepUntil is the wait of a timer the kernel failed to arm or read (it
// does not, short of a bug): on the runtime's timer, up to a millisecond
// late, so that a caller's pacing goes on late rather than stops.
func (t *Timer) sleepUntil(deadline time.Time) error {
	s := time.NewTimer(time.Until(deadline))
	defer s.Stop()
	select {
	case <-t.ctx.Done():
		return t.ctx.Err()
	case <-s.C:
		return nil
	}
}

// armOnce sets the timer to t.spec. It never blocks, so it is a raw system
// call, sparing the runtime's system-call bookkeeping (internal/rawsock
// says why that matters at tens of thousands of calls a second).
func (t *Timer) armOnce(fd uintptr) {
	_, _, t.armErr = unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&t.spec)), 0, 0, 0)
}

// readOnce reads the expiration count; EAGAIN means not yet expired and
// sends the caller to wait in the poller.
func (t *Timer) readOnce(fd uintptr) bool {
	_, err := rawsock.Read(int(fd), t.buf[:])
	if err == syscall.EAGAIN {
		return false
	}
	t.rerr = err
	return true
}

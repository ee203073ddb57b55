//go:build !linux

package hrtimer

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Timer is a one-shot timer whose waits end early when its context ends.
// Close releases it.
type Timer struct {
	ctx       context.Context
	timer     *time.Timer
	closed    chan struct{}
	closeOnce sync.Once
}

// New returns a Timer whose waits end when ctx ends.
func New(ctx context.Context) (*Timer, error) {
	return &Timer{ctx: ctx, timer: time.NewTimer(time.Hour), closed: make(chan struct{})}, nil
}

// Close releases the timer; a wait in progress returns an error.
func (t *Timer) Close() error {
	t.closeOnce.Do(func() {
		t.timer.Stop()
		close(t.closed)
	})
	return nil
}

func (t *Timer) wait(d time.Duration) error {
	t.timer.Reset(d)
	select {
	case <-t.timer.C:
		return nil
	case <-t.ctx.Done():
		return t.ctx.Err()
	case <-t.closed:
		return errors.New("hrtimer: timer closed")
	}
}

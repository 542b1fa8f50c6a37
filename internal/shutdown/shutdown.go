// Package shutdown holds the time budget of a Close, shared by the bus,
// its subscriptions and the partition manager: a Close returns by its
// ctx's deadline plus one short grace, on every path.
package shutdown

import (
	"context"
	"errors"
	"time"
)

// grace is how long past its ctx a Close may take to collect what has
// just finished (a handler that returned on cancellation, a backend that
// closed at once). It is one budget for the whole Close, not one per
// step.
const grace = 50 * time.Millisecond

// WithGrace returns a ctx that ends grace after ctx ends: the hard
// deadline of a Close.
func WithGrace(ctx context.Context) (context.Context, context.CancelFunc) {
	hard, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return hard, func() {
		stop()
		cancel()
	}
}

// WaitOrDone waits for ch until hard ends; it reports whether ch was
// closed.
func WaitOrDone(hard context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
	}
	select {
	case <-ch:
		return true
	case <-hard.Done():
		return false
	}
}

// CloseBounded runs a close that takes no ctx (the SPI's Close methods) and
// waits for it until hard ends; it keeps running after that, and its error
// is then lost.
func CloseBounded(hard context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-hard.Done():
		return errors.New("did not return before the close ctx ended")
	}
}

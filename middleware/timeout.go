package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventbus-go/bus"
)

// ErrTimeout is wrapped by the error Timeout returns when a handler call
// failed after its deadline passed.
var ErrTimeout = errors.New("handler timed out")

// Timeout returns middleware that gives each call of the handler its own
// deadline of d from the moment of the call. Placed inside Retry
// (bus.WithMiddleware(Retry(...), Timeout(d))) every retry gets a fresh
// deadline; placed outside, d bounds all retries together.
//
// The handler must watch its ctx: Timeout cannot stop a handler that
// ignores it. When the handler returns an error after the deadline passed
// (and the parent ctx is still live) the error wraps ErrTimeout and the
// handler's error. A nil return stands even if it came late: the work was
// done. d <= 0 returns the handler unchanged.
func Timeout(d time.Duration) bus.Middleware {
	return func(next bus.Handler) bus.Handler {
		if d <= 0 {
			return next
		}
		return func(ctx context.Context, del *bus.Delivery) error {
			cctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			err := next(cctx, del)
			if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("middleware: %w after %v: %w", ErrTimeout, d, err)
			}
			return err
		}
	}
}

package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventbus-go/bus"
)

// ErrTimeout is wrapped by the error Timeout returns when a handler call
// ended after its deadline passed.
var ErrTimeout = errors.New("handler timed out")

// Timeout returns middleware that gives each call of the handler its own
// deadline of d from the moment of the call. It follows the same rule as
// bus.WithHandlerTimeout: a call that ends after its deadline failed, even
// when it returned nil (its work may have been cut short, and the message
// is safer retried than acked). The difference is only the scope:
// WithHandlerTimeout bounds the whole delivery, while Timeout placed inside
// Retry (bus.WithMiddleware(Retry(...), Timeout(d))) gives every in-process
// retry a fresh deadline.
//
// The handler must watch its ctx: Timeout cannot stop a handler that
// ignores it. When the call ends after the deadline passed (and the parent
// ctx is still live) the error wraps ErrTimeout, context.DeadlineExceeded
// and the handler's error, if any. d <= 0 returns the handler unchanged.
func Timeout(d time.Duration) bus.Middleware {
	return func(next bus.Handler) bus.Handler {
		if d <= 0 {
			return next
		}
		return func(ctx context.Context, del *bus.Delivery) error {
			cctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			err := next(cctx, del)
			if ctx.Err() != nil || !errors.Is(cctx.Err(), context.DeadlineExceeded) {
				return err
			}
			if err == nil {
				return fmt.Errorf("middleware: %w after %v: %w", ErrTimeout, d, context.DeadlineExceeded)
			}
			return fmt.Errorf("middleware: %w after %v: %w", ErrTimeout, d, err)
		}
	}
}

package middleware

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/eventbus-go/bus"
)

// Defaults of Retry's in-process waits when newBackOff is nil. They are
// short on purpose: they pace calls inside one delivery, while the bus's
// retry backoff (100ms doubling to 30s) paces redeliveries through the
// broker.
const (
	InProcessRetryInitial  = 10 * time.Millisecond
	InProcessRetryMaxDelay = time.Second
)

// Retry returns middleware that retries in process: it calls the handler
// up to attempts times within the same delivery while it returns an error,
// waiting between calls as newBackOff says. attempts below 1 count as 1.
//
// It composes with the broker's redelivery, it does not replace it: only
// the last error reaches the bus, which then nacks with its own backoff
// (bus.WithRetryBackoff) or dead-letters after bus.WithMaxDeliveries, and
// every redelivery runs the in-process attempts again. Use it for quick,
// transient failures (a busy connection pool) that are cheaper to retry
// here than to send back through the broker; Delivery.Attempt counts
// broker deliveries only.
//
// newBackOff is called once per delivery; nil means exponential with
// jitter from InProcessRetryInitial up to InProcessRetryMaxDelay. When the
// policy returns backoff.Stop the last error is returned at once.
//
// Retry does not retry errors marked with bus.Reject, stops when the
// handler ctx ends (returning the handler's last error), and stops when
// the handler settled the delivery itself during the failed call
// (AckManual). A panic is not retried; it propagates to the bus.
//
// Before each wait Retry restarts the delivery's lease with Extend, where
// the backend supports it, so that a long retry sequence is not redelivered
// to another consumer meanwhile.
func Retry(attempts int, newBackOff func() backoff.BackOff) bus.Middleware {
	if attempts < 1 {
		attempts = 1
	}
	if newBackOff == nil {
		newBackOff = defaultRetryBackOff
	}
	return func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			var b backoff.BackOff
			for i := 1; ; i++ {
				before := d.Outcome()
				err := next(ctx, d)
				if err == nil || i >= attempts || bus.IsRejected(err) || d.Outcome() != before {
					return err
				}
				if b == nil {
					b = newBackOff()
					b.Reset()
				}
				delay := b.NextBackOff()
				if delay == backoff.Stop {
					return err
				}
				if before == bus.OutcomePending {
					// Unsupported or failed extends leave the lease as it
					// is; the retry goes on either way.
					_ = d.Extend(ctx)
				}
				if !sleep(ctx, delay) {
					return err
				}
			}
		}
	}
}

func defaultRetryBackOff() backoff.BackOff {
	e := backoff.NewExponentialBackOff()
	e.InitialInterval = InProcessRetryInitial
	e.MaxInterval = InProcessRetryMaxDelay
	e.MaxElapsedTime = 0
	return e
}

// sleep waits for d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

package bus

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgcheck"
)

// Sentinel errors. Errors returned by the bus wrap one of them where a
// caller may want to branch; use errors.Is.
var (
	// ErrClosed: the bus or subscription is closed.
	ErrClosed = backend.ErrClosed
	// ErrInvalidTopic: the topic is empty, too long, or has a character
	// outside letters, digits and ". _ - :", or an empty "."-token.
	ErrInvalidTopic = backend.ErrInvalidTopic
	// ErrInvalidMessage: a message is nil or invalid (see Publish), or a
	// settlement method was called on a Delivery that did not come from a
	// subscription (use bustest.NewDelivery to unit-test handlers).
	ErrInvalidMessage = msgcheck.ErrInvalidMessage
	// ErrPayloadTooLarge: a payload is over the max payload.
	ErrPayloadTooLarge = msgcheck.ErrPayloadTooLarge
	// ErrUnsupported: the backend cannot do what was asked.
	ErrUnsupported = backend.ErrUnsupported
	// ErrInvalidOption: an option value or URL parameter is out of range,
	// unknown or repeated. Backends wrap the same value.
	ErrInvalidOption = backend.ErrInvalidOption
	// ErrLeaseLost is the cause of a handler's ctx cancellation when the
	// bus could not keep the delivery's lease alive (the backend has no
	// Extender, an extension failed, or WithMaxExtension was reached), so
	// the message may be delivered again. Read it with context.Cause.
	ErrLeaseLost = errors.New("lease lost")
	// ErrClosing is the cause of a handler's ctx cancellation when its
	// subscription shuts down (Subscription.Close or Bus.Close whose ctx
	// ended, or the Subscribe ctx ended and the handler outlived the
	// shutdown's wait). A shutdown is not a failure: a delivery whose
	// handler then returns an error (other than a rejected one) is given
	// back to the group without counting as an attempt and without being
	// reported. Read it with context.Cause.
	ErrClosing = errors.New("subscription closing")
	// ErrAlreadySettled: the delivery was already acked, nacked, rejected
	// or its lease ran out; the first settlement wins.
	ErrAlreadySettled = errors.New("delivery already settled")
)

// PublishError is returned by Publish when some messages of a batch failed.
// errors.Is on a PublishError matches the errors of every failed message.
//
// When Rejected is true, validation failed before any I/O: Failed lists the
// invalid messages and NO message of the batch was sent. Otherwise the
// backend stored every message not listed in Failed.
type PublishError struct {
	Topic    string
	Failed   []Failure // position in the Publish call, Message.ID, error
	Rejected bool
}

func (e *PublishError) Error() string {
	var b strings.Builder
	if e.Rejected {
		fmt.Fprintf(&b, "bus: publish %q: batch rejected, nothing sent: %d invalid message(s)", e.Topic, len(e.Failed))
	} else {
		fmt.Fprintf(&b, "bus: publish %q: %d message(s) failed", e.Topic, len(e.Failed))
	}
	for i, f := range e.Failed {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Failed)-i)
			break
		}
		fmt.Fprintf(&b, "; #%d: %v", f.Index, f.Err)
	}
	return b.String()
}

// Unwrap returns the error of each failed message.
func (e *PublishError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}

// The settlement vocabulary has four verbs, each in two forms with one
// meaning: a Delivery method, for any ack mode but AckOnReceive, and an
// error an AckOnSuccess handler returns (docs/semantics.md has the table).
//
//	Ack     d.Ack(ctx)            return nil
//	Nack    d.Nack(ctx, delay)    return Nack(err, delay), or err (the retry backoff)
//	Snooze  d.Snooze(ctx, delay)  return Snooze(delay)
//	Reject  d.Reject(ctx, reason) return Reject(err)

// Reject marks err as one that no retry can fix: returned by a handler
// (AckOnSuccess), the message goes straight to the dead-letter topic with
// code rejected, as Delivery.Reject does. Middleware that retries (such as
// middleware.Retry) does not retry it; IsRejected reports the mark. It is
// backend.Permanent, the mark with which a backend's Receive ends a
// subscription, so IsRejected answers the same for an error marked on
// either side. Reject(nil) is nil.
func Reject(err error) error { return backend.Permanent(err) }

// IsRejected reports whether err, or an error it wraps, was marked with
// Reject (or, by a backend, with backend.Permanent).
func IsRejected(err error) bool { return backend.IsPermanent(err) }

// Nack is the error an AckOnSuccess handler returns to have its delivery
// redelivered after d instead of after the subscription's retry backoff
// (WithRetryBackoff), as Delivery.Nack does: for example after an API
// answered "429, retry in 40 s". The redelivery counts as an attempt, is
// bounded by WithMaxDeliveries, and err is reported as a handler failure.
// A Reject mark in the same chain wins. It is backend.RetryAfter, read by
// backend.RetryAfterOf. Nack(nil, d) is nil; a negative d counts as 0.
// Every delay the bus waits (Nack, Snooze, Delivery.Nack, Delivery.Snooze,
// the retry backoff) is cut to MaxDelay, 100 years (876,000 h), on every
// backend: a due time must stay within what the brokers carry, int64
// nanoseconds since the Unix epoch.
func Nack(err error, d time.Duration) error { return backend.RetryAfter(err, d) }

// Snooze is the error an AckOnSuccess handler returns to have its
// delivery redelivered after d without counting an attempt, as
// Delivery.Snooze does. It is not reported as a failure. A d of 0 or less
// is no snooze: the error is a handler failure like any other (reported,
// retried after the backoff, counted), so that a message can never come
// back at once again and again without counting. A d longer than MaxDelay
// waits MaxDelay.
func Snooze(d time.Duration) error { return backend.Snooze(d) }

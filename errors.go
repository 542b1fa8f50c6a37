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
	// handler then returns an error (other than a Permanent one) is given
	// back to the group without counting as an attempt and without being
	// reported. Read it with context.Cause.
	ErrClosing = errors.New("subscription closing")
	// ErrAlreadySettled: the delivery was already acked, nacked, rejected
	// or its lease expired; the first settlement wins.
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

// Permanent marks err as one that no retry can fix. Returned by a handler
// (AckOnSuccess), the message goes straight to the dead-letter topic with
// code permanent; returned by a backend's Receive, the subscription ends
// with Err set. It is backend.Permanent: one concept on both sides, so
// IsPermanent answers the same for an error marked by either.
// Permanent(nil) is nil.
func Permanent(err error) error { return backend.Permanent(err) }

// Snooze is the error an AckOnSuccess handler returns to have its
// delivery redelivered after d without counting an attempt, as
// Delivery.Snooze does: the error form, for handlers that only return.
// It is not reported as a failure. A d of 0 or less is no snooze: the
// error is a handler failure like any other (reported, retried after the
// backoff, counted), so that a message can never come back at once again
// and again without counting. A d longer than 100 years waits 100 years (see RetryAfter).
func Snooze(d time.Duration) error { return backend.Snooze(d) }

// RetryAfter marks a handler error as one to retry after d instead of
// after the subscription's retry backoff (WithRetryBackoff): for example
// an API that answered "429, retry in 40 s". In AckOnSuccess the message
// is redelivered after d; the retry still counts as an attempt and is
// still bounded by WithMaxDeliveries. A Permanent mark in the same chain
// wins. It is backend.RetryAfter, read by backend.RetryAfterOf.
// RetryAfter(nil, d) is nil; a negative d counts as 0. Every delay the
// bus waits (RetryAfter, Snooze, Delivery.Nack, Delivery.Snooze, the
// retry backoff) is cut to 100 years (876,000 h) on every backend: a due
// time must stay within what the brokers carry, int64 nanoseconds since
// the Unix epoch.
func RetryAfter(err error, d time.Duration) error { return backend.RetryAfter(err, d) }

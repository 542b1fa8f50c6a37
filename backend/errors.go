package backend

import (
	"errors"
	"time"
)

// ErrClosed is wrapped by errors from a closed Backend or Subscription.
var ErrClosed = errors.New("closed")

// ErrStale is wrapped by the error of Nack, Extend or DeadLetter when the
// AckID names a delivery whose lease has run out (the message may have been
// delivered again since). Such a call never touches the newer delivery.
// Ack of a stale AckID is not an error: it settles the message if it is
// still unsettled.
var ErrStale = errors.New("stale delivery")

// ErrSnoozeLimit is wrapped by the error of a Snooze that the backend
// cannot leave uncounted (see Snoozer); the bus nacks instead.
var ErrSnoozeLimit = errors.New("snooze limit reached")

// ErrNotFound is wrapped by the errors of the bus's inspection calls for
// what is not there: a dead letter named by its ID that is not on its
// topic, a consumer group that does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnsupported is wrapped by the error of a call the backend cannot
// serve (a capability it lacks, a store it does not have). The bus
// re-exports it as bus.ErrUnsupported.
var ErrUnsupported = errors.New("unsupported by backend")

// ErrInvalidMessage is wrapped by the error about a message that cannot
// be carried as it is (a field out of range, a reserved header). The bus
// re-exports it as bus.ErrInvalidMessage.
var ErrInvalidMessage = errors.New("invalid message")

// ErrInvalidTopic is wrapped by the error of ValidateTopic; the bus
// re-exports it as bus.ErrInvalidTopic.
var ErrInvalidTopic = errors.New("invalid topic")

// ErrInvalidOption is wrapped by errors about an option or URL parameter
// that is out of range, unknown or repeated. The bus re-exports it as
// bus.ErrInvalidOption so one errors.Is works for every backend.
var ErrInvalidOption = errors.New("invalid option")

// Permanent marks err as one that no retry can fix (for example a missing
// permission or a stream configured for other subjects). When Receive
// returns such an error the bus ends the subscription: Err() reports it and
// Done() is closed. Other Receive errors are retried with backoff. It is
// the same mark as bus.Reject, which a handler returns to dead-letter a
// message at once. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// RetryAfter marks err, returned by a handler, as one to retry after d
// instead of after the subscription's retry backoff: for example an API
// that answered "429, retry in 40 s". The retry still counts as an attempt
// and is still bounded by the max deliveries. It is what bus.Nack
// returns. RetryAfter(nil, d) is nil; a negative d counts as 0.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: max(d, 0)}
}

// RetryAfterOf returns the delay of the outermost RetryAfter mark in
// err's chain.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// Snooze is the error a handler returns to have its delivery given back
// to the group after d without counting an attempt (the error form of
// bus.Delivery.Snooze, for AckOnSuccess handlers). It is what bus.Snooze
// returns. A d of 0 or less is no snooze: SnoozeOf reports false, and
// the error is a failure like any other, which counts.
func Snooze(d time.Duration) error { return &snoozeError{after: d} }

// SnoozeOf returns the delay of the outermost Snooze in err's chain, when
// it is positive.
func SnoozeOf(err error) (time.Duration, bool) {
	var s *snoozeError
	if errors.As(err, &s) && s.after > 0 {
		return s.after, true
	}
	return 0, false
}

type snoozeError struct{ after time.Duration }

func (e *snoozeError) Error() string {
	if e.after <= 0 {
		return "snooze delay " + e.after.String() + " is not positive: a snooze needs a delay"
	}
	return "snoozed for " + e.after.String()
}

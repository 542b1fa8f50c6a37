package middleware

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/eventbus-go/bus"
)

// BreakerState is the state of a Breaker.
type BreakerState int

const (
	// BreakerClosed: handlers run; failures are counted.
	BreakerClosed BreakerState = iota
	// BreakerOpen: handlers do not run; deliveries are nacked with a delay.
	BreakerOpen
	// BreakerHalfOpen: one probe delivery runs; its result closes or
	// reopens the breaker.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("BreakerState(%d)", int(s))
}

// ErrBreakerOpen is returned by the breaker's handler when it is open and
// the delivery could not be nacked (for example in AckOnReceive).
var ErrBreakerOpen = errors.New("circuit breaker open")

// Defaults of NewBreaker.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerOpenFor  = 10 * time.Second
)

// BreakerOption configures NewBreaker.
type BreakerOption func(*Breaker)

// BreakerFailures sets how many consecutive failures open the breaker
// (default DefaultBreakerFailures). Values < 1 keep the default.
func BreakerFailures(n int) BreakerOption {
	return func(b *Breaker) {
		if n >= 1 {
			b.failures = n
		}
	}
}

// BreakerOpenFor sets how long the breaker stays open before it lets a
// probe through (default DefaultBreakerOpenFor). Values <= 0 keep the
// default.
func BreakerOpenFor(d time.Duration) BreakerOption {
	return func(b *Breaker) {
		if d > 0 {
			b.openFor = d
		}
	}
}

// BreakerIsFailure sets which handler errors count as failures of the
// dependency. The default counts every error except those marked with
// bus.Reject, which are about the message, not the dependency.
func BreakerIsFailure(f func(error) bool) BreakerOption {
	return func(b *Breaker) {
		if f != nil {
			b.isFailure = f
		}
	}
}

// BreakerOnStateChange sets a function called (outside the breaker's
// lock) with the old and new state on every transition.
func BreakerOnStateChange(f func(from, to BreakerState)) BreakerOption {
	return func(b *Breaker) { b.onChange = f }
}

// Breaker is a circuit breaker for handlers. It is closed while the
// handler works; after n consecutive failures it opens and, instead of
// calling the handler, nacks each delivery with a delay that ends when the
// breaker next lets a probe through. After the open period one delivery at
// a time runs as a probe (half-open): success closes the breaker, failure
// opens it again. It is safe for concurrent use, and one Breaker may guard
// several subscriptions that share a dependency.
//
// The project writes its own breaker because none of its dependencies
// provides one, and what it needs is small and bus-specific: the open
// state must nack with the remaining open time as delay rather than fail
// the call, so the broker holds the messages instead of the handler
// spinning on them. The state machine is about a hundred lines.
//
// Deliveries nacked while the breaker is open count towards
// bus.WithMaxDeliveries: set it so that a long outage does not
// dead-letter messages that only waited.
type Breaker struct {
	failures  int
	openFor   time.Duration
	isFailure func(error) bool
	onChange  func(from, to BreakerState)
	now       func() time.Time

	mu          sync.Mutex
	state       BreakerState
	consecutive int
	openedAt    time.Time
	probing     bool
}

// NewBreaker returns a closed Breaker.
func NewBreaker(opts ...BreakerOption) *Breaker {
	b := &Breaker{
		failures:  DefaultBreakerFailures,
		openFor:   DefaultBreakerOpenFor,
		isFailure: func(err error) bool { return !bus.IsRejected(err) },
		now:       time.Now,
	}
	for _, o := range opts {
		if o != nil {
			o(b)
		}
	}
	return b
}

// CircuitBreaker returns the middleware of a new Breaker with opts. Use
// NewBreaker when the state must be read or shared.
func CircuitBreaker(opts ...BreakerOption) bus.Middleware {
	return NewBreaker(opts...).Middleware()
}

// State returns the current state. An open breaker whose open period
// has passed reports BreakerHalfOpen.
func (b *Breaker) State() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerOpen && !b.now().Before(b.openedAt.Add(b.openFor)) {
		return BreakerHalfOpen
	}
	return b.state
}

// Middleware returns handler middleware guarded by b.
func (b *Breaker) Middleware() bus.Middleware {
	return func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			probe, wait := b.admit()
			if wait > 0 {
				if err := d.Nack(ctx, wait); err != nil {
					return fmt.Errorf("middleware: %w (nack: %w)", ErrBreakerOpen, err)
				}
				return nil
			}
			done := false
			defer func() {
				if !done { // panic: a failure of the dependency as far as we know
					b.record(probe, true)
				}
			}()
			err := next(ctx, d)
			done = true
			b.record(probe, err != nil && b.isFailure(err))
			return err
		}
	}
}

// admit decides whether a call may run. It returns a positive wait when
// the call must not run, and probe when the call is the half-open probe.
func (b *Breaker) admit() (probe bool, wait time.Duration) {
	b.mu.Lock()
	var from, to BreakerState
	changed := false
	switch b.state {
	case BreakerClosed:
	case BreakerOpen:
		left := b.openedAt.Add(b.openFor).Sub(b.now())
		if left > 0 {
			b.mu.Unlock()
			return false, left
		}
		from, to, changed = BreakerOpen, BreakerHalfOpen, true
		b.state, b.probing, probe = BreakerHalfOpen, true, true
	case BreakerHalfOpen:
		if b.probing {
			b.mu.Unlock()
			// The probe's verdict is due soon; look again after a short
			// fraction of the open period.
			return false, max(b.openFor/10, time.Millisecond)
		}
		b.probing, probe = true, true
	}
	b.mu.Unlock()
	if changed {
		b.notify(from, to)
	}
	return probe, 0
}

// record takes the result of a call that ran.
func (b *Breaker) record(probe, failed bool) {
	b.mu.Lock()
	from := b.state
	if probe {
		b.probing = false
	}
	switch {
	case failed && (probe || b.state == BreakerHalfOpen):
		b.state, b.openedAt, b.consecutive = BreakerOpen, b.now(), 0
	case failed:
		b.consecutive++
		if b.state == BreakerClosed && b.consecutive >= b.failures {
			b.state, b.openedAt, b.consecutive = BreakerOpen, b.now(), 0
		}
	case probe:
		b.state, b.consecutive = BreakerClosed, 0
	case b.state == BreakerClosed:
		b.consecutive = 0
	}
	to := b.state
	b.mu.Unlock()
	if from != to {
		b.notify(from, to)
	}
}

func (b *Breaker) notify(from, to BreakerState) {
	if b.onChange != nil {
		b.onChange(from, to)
	}
}

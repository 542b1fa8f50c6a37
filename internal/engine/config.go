package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/observer"
)

// AckMode says when a delivery is settled.
type AckMode int

const (
	// AckOnSuccess acks when the handler returns nil, retries on an error.
	AckOnSuccess AckMode = iota
	// AckOnReceive acks before the handler runs (at-most-once).
	AckOnReceive
	// AckManual leaves settlement to the handler.
	AckManual
)

// Sentinel errors; the root package re-exports them.
var (
	ErrClosed          = backend.ErrClosed
	ErrInvalidOption   = backend.ErrInvalidOption
	ErrUnsupported     = backend.ErrUnsupported
	ErrPayloadTooLarge = errors.New("payload too large")
	ErrLeaseLost       = errors.New("lease lost")
	ErrAlreadySettled  = errors.New("delivery already settled")
	ErrClosing         = errors.New("subscription closing")
)

// Limiter is a shared capacity limit (the root package's Limiter).
type Limiter interface {
	Acquire(ctx context.Context, max int) (int, error)
	Release(n int)
}

// Config is what a subscription runs with; the root package builds it from
// its options. Every field is set (the root package applies defaults).
type Config[P any] struct {
	Topic, Group   string
	AckMode        AckMode
	MaxInFlight    int
	Limiter        Limiter // shared limiter, or nil
	Feedback       func(latency time.Duration, err error)
	AckTimeout     time.Duration
	MaxExtension   time.Duration
	HandlerTimeout time.Duration // 0: none
	MaxDeliveries  int
	DeadLetter     string // "": dead-lettering off
	NewBackOff     func() backoff.BackOff
	MaxPayload     int
	AckBatch       int
	AckInterval    time.Duration
	Caps           backend.Capabilities
	Observer       observer.Observer
	Logger         *slog.Logger

	// Handler runs a delivery (middleware already applied).
	Handler func(ctx context.Context, d *Delivery[P]) error
	// Fill sets the public face of d from m; it must make d.Pub lead back
	// to d. d.Pub is zero when it is called.
	Fill func(d *Delivery[P], m *backend.Message)
	// ExpiresAt returns when a public face's message expires (zero:
	// never); nil when no message expires.
	ExpiresAt func(p *P) time.Time
	// DeliverAt returns the earliest time a public face's message may
	// reach its handler (zero: at once).
	DeliverAt func(p *P) time.Time
	// Locker, when set, is the group lock the subscription must hold to
	// fetch (see owner), taken as LockHolder, unique to the subscription.
	Locker     backend.GroupLocker
	LockHolder string
	// Pending, when set, reports how many deliveries of the group are
	// unsettled at the broker (known false when it cannot tell): a member
	// that takes the lock starts at once when none is, instead of waiting
	// one ack timeout for what the previous holder left.
	Pending func(ctx context.Context) (n int64, known bool)
	// KeyOf returns the ordering key of a public face; nil turns key
	// ordering off (see keyLines).
	KeyOf func(p *P) string
	// MaxWaiting bounds the deliveries that wait for their key, with key
	// ordering (see keyLines): they hold no in-flight slot, and fetching
	// pauses only while this many wait.
	MaxWaiting int
	// Refill sets d's public face to a copy of from with attempt, for the
	// retry of a keyed delivery; it must make d.Pub lead back to d.
	Refill func(d *Delivery[P], from *P, attempt int)
	// Info returns the message of a public face (ID, Key, Headers,
	// Payload, Attempt), for events and dead-letter copies.
	Info func(p *P) backend.Message
	// Publish stores dead-letter copies when the backend subscription is
	// not a backend.DeadLetterer.
	Publish func(ctx context.Context, topic string, msgs []*backend.Message) error
	// Go runs f on a goroutine the bus's Close waits for; it reports false
	// (and does nothing) once the bus is closing.
	Go func(f func()) bool
	// Ended is called once the subscription's shutdown is done.
	Ended func()
	// Event, when set, receives a lifecycle event at each step of a
	// delivery, and never blocks. nil turns events off, at the cost of a
	// nil check per step. A Sink, not a func: the event passes by pointer
	// from the worker's stack without moving to the heap.
	Event *lifecycle.Sink
}

// settleTimeout bounds the backend calls the engine makes to settle a
// delivery on its own (nack, release, dead-letter).
const settleTimeout = 10 * time.Second

// closeGrace is how long past its ctx a Close may take to collect what
// has just finished (a handler that returned on cancellation, a backend
// that closed at once). It is one budget for the whole Close, not one per
// step.
const closeGrace = 50 * time.Millisecond

// WithGrace returns a ctx that ends closeGrace after ctx ends: the hard
// deadline of a Close.
func WithGrace(ctx context.Context) (context.Context, context.CancelFunc) {
	hard, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(closeGrace, cancel) })
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

// RetryDelay returns the backoff delay for the given attempt, and false
// when the policy says stop.
func RetryDelay(newBackOff func() backoff.BackOff, attempt int) (time.Duration, bool) {
	b := newBackOff()
	b.Reset()
	var d time.Duration
	for i := 0; i < max(attempt, 1); i++ {
		d = b.NextBackOff()
		if d == backoff.Stop {
			return 0, false
		}
	}
	return d, true
}

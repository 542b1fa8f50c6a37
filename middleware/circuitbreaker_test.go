package middleware

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

// fakeClock is a settable clock for Breaker.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTestBreaker(clock *fakeClock, opts ...BreakerOption) *Breaker {
	b := NewBreaker(opts...)
	b.now = clock.now
	return b
}

func TestBreakerOpensAfterConsecutiveFailures(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	b := newTestBreaker(clock, BreakerFailures(3), BreakerOpenFor(time.Minute))
	for i := range 2 {
		probe, wait := b.admit()
		require.False(t, probe)
		require.Zero(t, wait, "call %d admitted while closed", i)
		b.record(false, true)
	}
	b.record(false, false) // a success resets the count
	for range 3 {
		_, wait := b.admit()
		require.Zero(t, wait)
		b.record(false, true)
	}
	assert.Equal(t, BreakerOpen, b.State(), "three consecutive failures open it")

	clock.advance(20 * time.Second)
	_, wait := b.admit()
	assert.Equal(t, 40*time.Second, wait, "an open breaker asks for the rest of the open period")
}

func TestBreakerHalfOpenAdmitsOneProbeThenCloses(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	var changes []string
	b := newTestBreaker(clock, BreakerFailures(1), BreakerOpenFor(time.Minute),
		BreakerOnStateChange(func(from, to BreakerState) { changes = append(changes, from.String()+">"+to.String()) }))
	b.admit()
	b.record(false, true)
	clock.advance(time.Minute)
	assert.Equal(t, BreakerHalfOpen, b.State(), "open period over")

	probe, wait := b.admit()
	require.True(t, probe, "first call after the open period is the probe")
	require.Zero(t, wait)
	_, wait = b.admit()
	assert.Positive(t, wait, "no second call while the probe runs")

	b.record(true, false)
	assert.Equal(t, BreakerClosed, b.State(), "a successful probe closes it")
	_, wait = b.admit()
	assert.Zero(t, wait, "closed again")
	assert.Equal(t, []string{"closed>open", "open>half-open", "half-open>closed"}, changes)
}

func TestBreakerFailedProbeReopens(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	b := newTestBreaker(clock, BreakerFailures(1), BreakerOpenFor(time.Minute))
	b.admit()
	b.record(false, true)
	clock.advance(time.Minute)
	probe, _ := b.admit()
	require.True(t, probe)
	b.record(true, true)
	assert.Equal(t, BreakerOpen, b.State(), "a failed probe reopens it")
	_, wait := b.admit()
	assert.Equal(t, time.Minute, wait, "for a full open period")
}

func TestBreakerIgnoresRejectedErrors(t *testing.T) {
	b := NewBreaker(BreakerFailures(1))
	h := b.Middleware()(func(ctx context.Context, d *bus.Delivery) error { return bus.Reject(errBoom) })
	for range 3 {
		require.Error(t, h(context.Background(), &bus.Delivery{}))
	}
	assert.Equal(t, BreakerClosed, b.State(), "message errors do not trip the breaker")
}

func TestBreakerNacksWithoutCallingHandlerWhileOpen(t *testing.T) {
	bb := testBus(t)
	rec, settled := recordOutcomes()
	br := NewBreaker(BreakerFailures(2), BreakerOpenFor(time.Hour))
	var calls counter
	subscribe(t, bb, "orders", func(ctx context.Context, d *bus.Delivery) error {
		calls.inc()
		return errBoom
	}, bus.WithMiddleware(rec, br.Middleware()), bus.WithRetryBackoff(constant(time.Hour)), bus.WithMaxInFlight(1))

	for range 2 {
		publish(t, bb, "orders", &bus.Message{})
		assert.Equal(t, bus.OutcomeNacked, nextSettlement(t, settled).outcome, "failures nacked by the bus")
	}
	require.Equal(t, BreakerOpen, br.State())
	publish(t, bb, "orders", &bus.Message{})
	assert.Equal(t, bus.OutcomeNacked, nextSettlement(t, settled).outcome, "open breaker nacks")
	assert.Equal(t, 2, calls.get(), "the handler is not called while open")
}

func TestBreakerReturnsErrBreakerOpenWhenNackImpossible(t *testing.T) {
	bb := testBus(t)
	br := NewBreaker(BreakerFailures(1), BreakerOpenFor(time.Hour))
	errs := make(chan error, 4)
	subscribe(t, bb, "orders", func(ctx context.Context, d *bus.Delivery) error {
		return errBoom
	}, bus.WithMiddleware(func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			err := next(ctx, d)
			errs <- err
			return err
		}
	}, br.Middleware()), bus.WithAckMode(bus.AckOnReceive), bus.WithMaxInFlight(1))
	publish(t, bb, "orders", &bus.Message{})
	require.ErrorIs(t, <-errs, errBoom)
	publish(t, bb, "orders", &bus.Message{})
	select {
	case err := <-errs:
		assert.ErrorIs(t, err, ErrBreakerOpen, "an acked delivery cannot be nacked; the breaker says why")
	case <-time.After(5 * time.Second):
		t.Fatal("second delivery not handled")
	}
}

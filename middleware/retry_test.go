package middleware

import (
	"context"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

func constant(d time.Duration) func() backoff.BackOff {
	return func() backoff.BackOff { return backoff.NewConstantBackOff(d) }
}

func TestRetryRunsHandlerAgainInSameDeliveryUntilSuccess(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	var calls counter
	attempts := make(chan int, 10)
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		attempts <- d.Attempt
		if calls.inc() < 3 {
			return errBoom
		}
		return nil
	}, bus.WithMiddleware(rec, Retry(5, constant(time.Millisecond))))
	publish(t, b, "orders", &bus.Message{Payload: []byte("x")})

	s := nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeAcked, s.outcome, "the third call succeeded, so the delivery is acked")
	assert.Equal(t, 3, calls.get(), "handler called until it succeeded")
	for range 3 {
		assert.Equal(t, 1, <-attempts, "all calls happen within the first delivery")
	}
}

func TestRetryReturnsLastErrorAfterAttempts(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	var calls counter
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		calls.inc()
		return errBoom
	}, bus.WithMiddleware(rec, Retry(3, constant(time.Millisecond))), bus.WithMaxDeliveries(1))
	publish(t, b, "orders", &bus.Message{})

	s := nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeDeadLettered, s.outcome, "the error reaches the bus, which dead-letters at max deliveries 1")
	assert.Equal(t, 3, calls.get(), "handler called attempts times")
}

func TestRetryDoesNotRetryRejectedErrors(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	var calls counter
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		calls.inc()
		return bus.Reject(errBoom)
	}, bus.WithMiddleware(rec, Retry(5, constant(time.Millisecond))))
	publish(t, b, "orders", &bus.Message{})

	s := nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeDeadLettered, s.outcome, "a permanent error is dead-lettered")
	assert.Equal(t, 1, calls.get(), "a permanent error is not retried")
}

func TestRetryStopsWhenBackOffSaysStop(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	var calls counter
	stop := func() backoff.BackOff { return &backoff.StopBackOff{} }
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		calls.inc()
		return errBoom
	}, bus.WithMiddleware(rec, Retry(5, stop)), bus.WithRetryBackoff(constant(time.Hour)))
	publish(t, b, "orders", &bus.Message{})

	s := nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeNacked, s.outcome, "the bus nacks the returned error")
	assert.Equal(t, 1, calls.get(), "backoff.Stop ends the retries at once")
}

func TestRetryStopsWhenHandlerCtxEnds(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	var calls counter
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		calls.inc()
		return errBoom
	}, bus.WithMiddleware(rec, Retry(5, constant(time.Hour))),
		bus.WithHandlerTimeout(50*time.Millisecond), bus.WithRetryBackoff(constant(time.Hour)))
	publish(t, b, "orders", &bus.Message{})

	// The backoff is an hour: only the ctx deadline can end the wait
	// before nextSettlement's 5s limit.
	s := nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeNacked, s.outcome, "the last handler error reaches the bus")
	assert.Equal(t, 1, calls.get(), "no retry after the ctx ended")
}

func TestRetryStopsWhenHandlerSettledTheDelivery(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	var calls counter
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		calls.inc()
		require.NoError(t, d.Reject(ctx, errBoom), "reject")
		return errBoom
	}, bus.WithMiddleware(rec, Retry(5, constant(time.Millisecond))), bus.WithAckMode(bus.AckManual))
	publish(t, b, "orders", &bus.Message{})

	s := nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeDeadLettered, s.outcome, "the handler's own settlement stands")
	noSettlement(t, settled, 50*time.Millisecond)
	assert.Equal(t, 1, calls.get(), "a delivery the handler settled is not retried")
}

func TestRetryRetriesInAckOnReceiveMode(t *testing.T) {
	b := testBus(t)
	var calls counter
	done := make(chan struct{})
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		if calls.inc() < 2 {
			return errBoom
		}
		close(done)
		return nil
	}, bus.WithMiddleware(Retry(3, constant(time.Millisecond))), bus.WithAckMode(bus.AckOnReceive))
	publish(t, b, "orders", &bus.Message{})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("handler not retried after the pre-handler ack")
	}
	assert.Equal(t, 2, calls.get(), "retried once, then succeeded")
}

package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

func nopBatch(context.Context, []*bus.Delivery) error { return nil }

func TestBatchOptionsAreValidatedBeforeIO(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	noop := func(context.Context, *bus.Delivery) error { return nil }
	tests := []struct {
		name string
		sub  func() (*bus.Subscription, error)
	}{
		{"WithBatch on Subscribe", func() (*bus.Subscription, error) {
			return b.Subscribe(ctx, "t", noop, bus.WithBatch(10, time.Second))
		}},
		{"nil batch handler", func() (*bus.Subscription, error) { return b.SubscribeBatch(ctx, "t", nil) }},
		{"max 0", func() (*bus.Subscription, error) {
			return b.SubscribeBatch(ctx, "t", nopBatch, bus.WithBatch(0, time.Second))
		}},
		{"wait 0", func() (*bus.Subscription, error) { return b.SubscribeBatch(ctx, "t", nopBatch, bus.WithBatch(10, 0)) }},
		{"max above the in-flight bound", func() (*bus.Subscription, error) {
			return b.SubscribeBatch(ctx, "t", nopBatch, bus.WithBatch(10, time.Second), bus.WithMaxInFlight(5))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.sub()
			require.ErrorIs(t, err, bus.ErrInvalidOption)
		})
	}
}

// Without WithMaxInFlight the in-flight bound (default 64) is raised to
// the batch max, so a batch of 100 fills.
func TestBatchRaisesTheDefaultInFlightBound(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	sizes := make(chan int, 10)
	_, err := b.SubscribeBatch(ctx, "batch.raise", func(_ context.Context, ds []*bus.Delivery) error {
		sizes <- len(ds)
		return nil
	}, bus.WithBatch(100, time.Minute))
	require.NoError(t, err)
	msgs := make([]*bus.Message, 100)
	for i := range msgs {
		msgs[i] = &bus.Message{Payload: []byte("x")}
	}
	require.NoError(t, b.Publish(ctx, "batch.raise", msgs...))
	select {
	case n := <-sizes:
		assert.Equal(t, 100, n, "one full batch of 100")
	case <-time.After(10 * time.Second):
		t.Fatal("no batch of 100 within 10s")
	}
}

// A panic in a batch handler is reported for each delivery and retries
// them all.
func TestBatchPanicRetriesEveryDelivery(t *testing.T) {
	var panics atomic.Int32
	b := openMem(t, bus.WithObserver(observer.Func(func(_ context.Context, e observer.Event) {
		if e.Scope == observer.ScopePanic {
			panics.Add(1)
		}
	})))
	ctx := context.Background()
	var mu sync.Mutex
	attempts := map[string][]int{}
	_, err := b.SubscribeBatch(ctx, "batch.panic", func(_ context.Context, ds []*bus.Delivery) error {
		mu.Lock()
		for _, d := range ds {
			attempts[d.ID] = append(attempts[d.ID], d.Attempt)
		}
		mu.Unlock()
		if ds[0].Attempt == 1 {
			panic("batch handler panic")
		}
		return nil
	}, bus.WithBatch(3, time.Minute), bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }))
	require.NoError(t, err)
	msgs := []*bus.Message{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	require.NoError(t, b.Publish(ctx, "batch.panic", msgs...))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts["a"]) == 2 && len(attempts["b"]) == 2 && len(attempts["c"]) == 2
	}, 10*time.Second, 5*time.Millisecond, "every delivery of the batch that panicked is retried")
	assert.EqualValues(t, 3, panics.Load(), "the panic is reported for each delivery")
}

type batchCtxKey struct{}

// Middleware runs around each delivery; the batch's ctx carries the
// values of its first delivery's ctx and ends with the handler timeout of
// its deliveries.
func TestBatchMiddlewareAndContext(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	var calls atomic.Int32
	mw := func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			calls.Add(1)
			return next(context.WithValue(ctx, batchCtxKey{}, d.ID), d)
		}
	}
	type seen struct {
		first, value string
		err          error
	}
	got := make(chan seen, 1)
	_, err := b.SubscribeBatch(ctx, "batch.ctx", func(ctx context.Context, ds []*bus.Delivery) error {
		<-ctx.Done()
		v, _ := ctx.Value(batchCtxKey{}).(string)
		got <- seen{first: ds[0].ID, value: v, err: context.Cause(ctx)}
		return nil
	}, bus.WithBatch(2, time.Minute), bus.WithMiddleware(mw), bus.WithHandlerTimeout(200*time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "batch.ctx", &bus.Message{ID: "m1"}, &bus.Message{ID: "m2"}))
	select {
	case s := <-got:
		assert.Equal(t, s.first, s.value, "the batch ctx carries the first delivery's values")
		assert.ErrorIs(t, s.err, context.DeadlineExceeded, "the handler timeout of the deliveries ends the batch's ctx")
	case <-time.After(10 * time.Second):
		t.Fatal("the batch's ctx did not end with the handler timeout")
	}
	assert.GreaterOrEqual(t, calls.Load(), int32(2), "middleware runs once per delivery")
}

var errBatchTest = errors.New("batch test")

// Settlement inside a batch: what the handler settled keeps its outcome,
// the rest is settled by the returned error (here bus.Reject: dead-lettered).
func TestBatchReturnedErrorSettlesOnlyTheRest(t *testing.T) {
	b := openMem(t)
	ctx := context.Background()
	done := make(chan []*bus.Delivery, 1)
	_, err := b.SubscribeBatch(ctx, "batch.rest", func(ctx context.Context, ds []*bus.Delivery) error {
		if err := ds[0].Ack(ctx); err != nil {
			return err
		}
		done <- ds
		return bus.Reject(fmt.Errorf("the rest: %w", errBatchTest))
	}, bus.WithBatch(3, time.Minute))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "batch.rest", &bus.Message{ID: "r1"}, &bus.Message{ID: "r2"}, &bus.Message{ID: "r3"}))
	var ds []*bus.Delivery
	select {
	case ds = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch")
	}
	require.Eventually(t, func() bool {
		return ds[1].Outcome() != bus.OutcomePending && ds[2].Outcome() != bus.OutcomePending
	}, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, bus.OutcomeAcked, ds[0].Outcome(), "the delivery the handler acked stays acked")
	assert.Equal(t, bus.OutcomeDeadLettered, ds[1].Outcome(), "a Reject error dead-letters the rest")
	assert.Equal(t, bus.OutcomeDeadLettered, ds[2].Outcome(), "a Reject error dead-letters the rest")
}

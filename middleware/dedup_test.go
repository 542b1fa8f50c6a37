package middleware

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

func TestMemoryStoreStates(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	s := NewMemoryStore(10)
	s.now = func() time.Time { return now }

	st, err := s.Begin(ctx, "k", "t1", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, DedupClaimed, st, "a new key is claimed")
	st, _ = s.Begin(ctx, "k", "t2", time.Minute)
	assert.Equal(t, DedupBusy, st, "a live claim makes the key busy")

	require.NoError(t, s.Abort(ctx, "k", "t2"))
	st, _ = s.Begin(ctx, "k", "t3", time.Minute)
	assert.Equal(t, DedupBusy, st, "abort with another token does not free the key")

	require.NoError(t, s.Abort(ctx, "k", "t1"))
	st, _ = s.Begin(ctx, "k", "t4", time.Minute)
	assert.Equal(t, DedupClaimed, st, "abort with the holder's token frees the key")

	require.NoError(t, s.Commit(ctx, "k", time.Hour))
	st, _ = s.Begin(ctx, "k", "t5", time.Minute)
	assert.Equal(t, DedupDone, st, "a committed key is done")
	require.NoError(t, s.Abort(ctx, "k", "t4"))
	st, _ = s.Begin(ctx, "k", "t6", time.Minute)
	assert.Equal(t, DedupDone, st, "abort does not undo a commit")

	now = now.Add(time.Hour + time.Second)
	st, _ = s.Begin(ctx, "k", "t7", time.Minute)
	assert.Equal(t, DedupClaimed, st, "a committed key is forgotten after its TTL")

	now = now.Add(2 * time.Minute)
	st, _ = s.Begin(ctx, "k", "t8", time.Minute)
	assert.Equal(t, DedupClaimed, st, "a claim whose lease passed can be taken again")
}

func TestMemoryStoreEvictsLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore(2)
	require.NoError(t, s.Commit(ctx, "a", time.Hour))
	require.NoError(t, s.Commit(ctx, "b", time.Hour))
	st, _ := s.Begin(ctx, "a", "t", time.Minute) // touch a
	require.Equal(t, DedupDone, st)
	require.NoError(t, s.Commit(ctx, "c", time.Hour)) // evicts b

	assert.Equal(t, 2, s.Len(), "size is bounded")
	st, _ = s.Begin(ctx, "a", "t", time.Minute)
	assert.Equal(t, DedupDone, st, "recently used key kept")
	st, _ = s.Begin(ctx, "b", "t", time.Minute)
	assert.Equal(t, DedupClaimed, st, "least recently used key evicted")
}

func TestDedupAcksDuplicateWithoutRunningHandler(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	var calls counter
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		calls.inc()
		return nil
	}, bus.WithMiddleware(rec, Dedup(NewMemoryStore(0))))

	publish(t, b, "orders", &bus.Message{ID: "m-1"})
	s := nextSettlement(t, settled)
	require.Equal(t, bus.OutcomeAcked, s.outcome, "first copy handled and acked")
	publish(t, b, "orders", &bus.Message{ID: "m-1"})
	s = nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeAcked, s.outcome, "duplicate acked")
	assert.Equal(t, 1, calls.get(), "handler ran once for two copies")
}

func TestDedupAcksDuplicateInManualMode(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	store := NewMemoryStore(0)
	require.NoError(t, store.Commit(context.Background(), "default/m-1", time.Hour))
	var calls counter
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		calls.inc()
		return d.Ack(ctx)
	}, bus.WithMiddleware(rec, Dedup(store)), bus.WithAckMode(bus.AckManual))
	publish(t, b, "orders", &bus.Message{ID: "m-1"})
	s := nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeAcked, s.outcome, "Dedup acks the duplicate itself")
	assert.Equal(t, 0, calls.get(), "handler not run for a known message")
}

func TestDedupRunsRedeliveryAfterHandlerFailure(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	var calls counter
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		if calls.inc() == 1 {
			return errBoom
		}
		return nil
	}, bus.WithMiddleware(rec, Dedup(NewMemoryStore(0))), bus.WithRetryBackoff(constant(time.Millisecond)))
	publish(t, b, "orders", &bus.Message{ID: "m-1"})

	s := nextSettlement(t, settled)
	require.Equal(t, bus.OutcomeNacked, s.outcome, "first attempt failed")
	s = nextSettlement(t, settled)
	require.Equal(t, bus.OutcomeAcked, s.outcome, "the redelivery ran the handler again")
	assert.Equal(t, 2, s.attempt, "second attempt")

	publish(t, b, "orders", &bus.Message{ID: "m-1"})
	s = nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeAcked, s.outcome, "later duplicate acked")
	assert.Equal(t, 2, calls.get(), "the later duplicate did not run the handler")
}

func TestDedupNacksDuplicateWhileClaimIsHeld(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	store := NewMemoryStore(0)
	st, err := store.Begin(context.Background(), "default/m-1", "other", time.Hour)
	require.NoError(t, err)
	require.Equal(t, DedupClaimed, st)
	errs := make(chan error, 1)
	var calls counter
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		calls.inc()
		return nil
	}, bus.WithMiddleware(rec, func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			err := next(ctx, d)
			errs <- err
			return err
		}
	}, Dedup(store)), bus.WithRetryBackoff(constant(time.Hour)))
	publish(t, b, "orders", &bus.Message{ID: "m-1"})

	s := nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeNacked, s.outcome, "a duplicate of a message in progress is nacked")
	assert.ErrorIs(t, <-errs, ErrDuplicateInProgress)
	assert.Equal(t, 0, calls.get(), "handler not run while another claim holds the key")
}

type failingStore struct{ err error }

func (f failingStore) Begin(context.Context, string, string, time.Duration) (DedupState, error) {
	return 0, f.err
}
func (f failingStore) Commit(context.Context, string, time.Duration) error { return f.err }
func (f failingStore) Abort(context.Context, string, string) error         { return f.err }

func TestDedupFailsDeliveryWhenStoreFails(t *testing.T) {
	storeErr := errors.New("store down")
	var calls counter
	h := Dedup(failingStore{storeErr})(func(ctx context.Context, d *bus.Delivery) error {
		calls.inc()
		return nil
	})
	err := h(context.Background(), &bus.Delivery{Message: bus.Message{ID: "m-1"}, Group: "g"})
	require.ErrorIs(t, err, storeErr, "a store error fails the delivery")
	assert.Equal(t, 0, calls.get(), "the handler never runs unclaimed")
}

func TestDedupAbortsClaimWhenHandlerPanics(t *testing.T) {
	store := NewMemoryStore(0)
	h := Dedup(store)(func(ctx context.Context, d *bus.Delivery) error { panic("boom") })
	d := &bus.Delivery{Message: bus.Message{ID: "m-1"}, Group: "g"}
	require.Panics(t, func() { _ = h(context.Background(), d) }, "the panic goes on to the bus")
	st, err := store.Begin(context.Background(), "g/m-1", "t", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, DedupClaimed, st, "the panicking attempt gave its claim back")
}

func TestDedupReportsCommitErrorButSucceeds(t *testing.T) {
	commitErr := errors.New("commit failed")
	store := &commitFailStore{MemoryStore: NewMemoryStore(0), err: commitErr}
	var reported error
	h := Dedup(store, DedupOnError(func(_ context.Context, _ *bus.Delivery, err error) { reported = err }))(
		func(ctx context.Context, d *bus.Delivery) error { return nil })
	err := h(context.Background(), &bus.Delivery{Message: bus.Message{ID: "m-1"}, Group: "g"})
	require.NoError(t, err, "the handler succeeded; the message is acked")
	assert.ErrorIs(t, reported, commitErr, "the commit error goes to DedupOnError")
}

type commitFailStore struct {
	*MemoryStore
	err error
}

func (s *commitFailStore) Commit(context.Context, string, time.Duration) error { return s.err }

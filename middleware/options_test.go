package middleware

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

// recordingStore is a Store that claims every key and records what Dedup
// passed to it.
type recordingStore struct {
	mu     sync.Mutex
	keys   []string
	leases []time.Duration
	ttls   []time.Duration
}

func (s *recordingStore) Begin(_ context.Context, key, _ string, lease time.Duration) (DedupState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, key)
	s.leases = append(s.leases, lease)
	return DedupClaimed, nil
}

func (s *recordingStore) Commit(_ context.Context, _ string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ttls = append(s.ttls, ttl)
	return nil
}

func (s *recordingStore) Abort(context.Context, string, string) error { return nil }

func TestDedupOptionsSetKeyLeaseAndTTL(t *testing.T) {
	store := &recordingStore{}
	h := Dedup(store,
		DedupKey(func(d *bus.Delivery) string { return "tenant-1/" + d.ID }),
		DedupLease(3*time.Second),
		DedupTTL(time.Hour),
	)(func(context.Context, *bus.Delivery) error { return nil })
	require.NoError(t, h(context.Background(), &bus.Delivery{Message: bus.Message{ID: "m-1"}}), "the handler succeeds")
	assert.Equal(t, []string{"tenant-1/m-1"}, store.keys, "DedupKey maps the delivery to the key")
	assert.Equal(t, []time.Duration{3 * time.Second}, store.leases, "DedupLease sets the claim's lease")
	assert.Equal(t, []time.Duration{time.Hour}, store.ttls, "DedupTTL sets how long a handled key is kept")
}

func TestDedupOptionsKeepDefaultsForZeroValues(t *testing.T) {
	store := &recordingStore{}
	h := Dedup(store, DedupKey(nil), DedupLease(0), DedupTTL(-1))(func(context.Context, *bus.Delivery) error { return nil })
	require.NoError(t, h(context.Background(), &bus.Delivery{Message: bus.Message{ID: "m-1"}, Group: "g"}))
	assert.Equal(t, []string{"g/m-1"}, store.keys, "the default key is group/ID")
	assert.Equal(t, []time.Duration{DefaultDedupLease}, store.leases)
	assert.Equal(t, []time.Duration{DefaultDedupTTL}, store.ttls)
}

func TestCircuitBreakerCountsOnlyWhatIsFailureSays(t *testing.T) {
	errTransient := errors.New("dependency down")
	errBadInput := errors.New("bad input")
	mw := CircuitBreaker(BreakerFailures(1), BreakerOpenFor(time.Hour),
		BreakerIsFailure(func(err error) bool { return errors.Is(err, errTransient) }))
	var calls int
	var next error
	h := mw(func(context.Context, *bus.Delivery) error {
		calls++
		return next
	})
	d := &bus.Delivery{}
	next = errBadInput
	for range 3 {
		require.ErrorIs(t, h(context.Background(), d), errBadInput, "errors that are not failures pass through")
	}
	assert.Equal(t, 3, calls, "the breaker stays closed for errors BreakerIsFailure refuses")
	next = errTransient
	require.ErrorIs(t, h(context.Background(), d), errTransient)
	err := h(context.Background(), d)
	require.ErrorIs(t, err, ErrBreakerOpen, "one failure opens a breaker of BreakerFailures(1)")
	assert.Equal(t, 4, calls, "the handler is not called while the breaker is open")
}

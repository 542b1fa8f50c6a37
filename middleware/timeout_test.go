package middleware

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

func TestTimeoutGivesEachRetryAFreshDeadline(t *testing.T) {
	b := testBus(t)
	rec, settled := recordOutcomes()
	var (
		mu        sync.Mutex
		deadlines []time.Time
	)
	subscribe(t, b, "orders", func(ctx context.Context, d *bus.Delivery) error {
		dl, ok := ctx.Deadline()
		require.True(t, ok, "Timeout sets a deadline")
		mu.Lock()
		deadlines = append(deadlines, dl)
		first := len(deadlines) == 1
		mu.Unlock()
		if first {
			<-ctx.Done() // use up the whole deadline
			return ctx.Err()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return nil
	}, bus.WithMiddleware(rec, Retry(3, constant(0)), Timeout(300*time.Millisecond)))
	publish(t, b, "orders", &bus.Message{})

	s := nextSettlement(t, settled)
	assert.Equal(t, bus.OutcomeAcked, s.outcome, "the retry ran with a live deadline and succeeded")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, deadlines, 2, "one timed-out call and one retry")
	assert.True(t, deadlines[1].After(deadlines[0]), "the retry got a later deadline than the first call")
}

func TestTimeoutWrapsErrTimeoutWhenHandlerFailsAfterDeadline(t *testing.T) {
	h := Timeout(10 * time.Millisecond)(func(ctx context.Context, d *bus.Delivery) error {
		<-ctx.Done()
		return ctx.Err()
	})
	err := h(context.Background(), &bus.Delivery{})
	require.ErrorIs(t, err, ErrTimeout, "a failure after the deadline is a timeout")
	require.ErrorIs(t, err, context.DeadlineExceeded, "the handler's error is kept")
}

func TestTimeoutTurnsLateNilIntoTimeoutLikeTheBus(t *testing.T) {
	t.Parallel()
	h := Timeout(time.Millisecond)(func(ctx context.Context, d *bus.Delivery) error {
		<-ctx.Done()
		return nil
	})
	err := h(context.Background(), &bus.Delivery{})
	require.ErrorIs(t, err, ErrTimeout, "a nil returned after the deadline is a timeout, as with bus.WithHandlerTimeout")
	require.ErrorIs(t, err, context.DeadlineExceeded, "the deadline is named")
}

func TestTimeoutDoesNotBlameItselfWhenParentCtxEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h := Timeout(time.Hour)(func(ctx context.Context, d *bus.Delivery) error { return ctx.Err() })
	err := h(ctx, &bus.Delivery{})
	require.ErrorIs(t, err, context.Canceled, "the parent's error passes through")
	assert.NotErrorIs(t, err, ErrTimeout, "a cancelled parent is not a timeout")
}

func TestTimeoutZeroReturnsHandlerUnchanged(t *testing.T) {
	h := Timeout(0)(func(ctx context.Context, d *bus.Delivery) error {
		_, ok := ctx.Deadline()
		assert.False(t, ok, "no deadline with Timeout(0)")
		return nil
	})
	require.NoError(t, h(context.Background(), &bus.Delivery{}))
}

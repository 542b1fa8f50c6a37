package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// pollErr waits, without calling ctx.Done, until ctx.Err is not nil, and
// fails the test after waitFor.
func pollErr(t *testing.T, ctx context.Context) error {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitFor)
	for ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-deadline:
			t.Error("the handler ctx was not cancelled")
			return nil
		}
	}
	return ctx.Err()
}

func TestHandlerCtxEndsWhenHandlerReturns(t *testing.T) {
	ctxs := make(chan context.Context, 2)
	f, _, _, _ := startFake(t, func(ctx context.Context, d *bus.Delivery) error {
		require.NoError(t, ctx.Err(), "the ctx is live while the handler runs")
		ctxs <- ctx
		return nil
	})
	f.push(msg("m1", 1))
	ctx := recv(t, ctxs)
	// The handler never called Done: the ctx ends all the same.
	require.ErrorIs(t, pollErr(t, ctx), context.Canceled, "the ctx ends when the handler returns")
	select {
	case <-ctx.Done():
	case <-time.After(waitFor):
		t.Fatal("Done of an ended handler ctx is not closed")
	}
	assert.ErrorIs(t, context.Cause(ctx), context.Canceled, "a handler that returned is not a lost lease")
	assert.NotErrorIs(t, context.Cause(ctx), bus.ErrLeaseLost)
}

func TestHandlerCtxDerivedCtxEndsWithTheHandler(t *testing.T) {
	derived := make(chan context.Context, 1)
	f, _, _, _ := startFake(t, func(ctx context.Context, d *bus.Delivery) error {
		c, cancel := context.WithCancel(ctx)
		_ = cancel // the handler forgets it: the bus ends the ctx
		derived <- c
		return nil
	})
	f.push(msg("m1", 1))
	c := recv(t, derived)
	select {
	case <-c.Done():
	case <-time.After(waitFor):
		t.Fatal("a ctx derived from the handler ctx did not end with the handler")
	}
}

func TestHandlerCtxCancelledByCloseWithoutDone(t *testing.T) {
	errs := make(chan error, 1)
	started := make(chan struct{})
	f, b, _, _ := startFake(t, func(ctx context.Context, d *bus.Delivery) error {
		close(started)
		errs <- pollErr(t, ctx)
		return nil
	})
	f.push(msg("m1", 1))
	recv(t, started)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_ = b.Close(ctx) // reports the handler it had to cancel
	require.ErrorIs(t, recv(t, errs), context.Canceled, "Close cancels the ctx of a handler that never called Done")
}

func TestHandlerCtxLeaseLostCauseWithoutDone(t *testing.T) {
	causes := make(chan error, 1)
	f, _, ev, _ := startFake(t, func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt == 1 {
			pollErr(t, ctx)
			causes <- context.Cause(ctx)
		}
		return nil
	}, bus.WithAckTimeout(40*time.Millisecond))
	f.push(msg("m1", 1))
	require.ErrorIs(t, recv(t, causes), bus.ErrLeaseLost, "a backend without Extender loses the lease of a long handler")
	// The keeper reports once it has let go of its lock, after it
	// cancelled the handler's ctx: the handler may see the cause first.
	require.Eventually(t, func() bool { return len(ev.byScope(observer.ScopeLease)) > 0 }, waitFor, time.Millisecond, "the lost lease is reported")
}

func TestManualLeasesExpireOnlyUnsettledDeliveries(t *testing.T) {
	const n = 8
	held := make(chan *bus.Delivery, n)
	f, _, ev, _ := startFake(t, func(_ context.Context, d *bus.Delivery) error {
		held <- d
		return nil
	}, bus.WithAckMode(bus.AckManual), bus.WithMaxInFlight(n), bus.WithAckTimeout(60*time.Millisecond))
	for i := range n {
		f.push(msg("m"+string(rune('a'+i)), 1))
	}
	var ds []*bus.Delivery
	for range n {
		ds = append(ds, recv(t, held))
	}
	var wg sync.WaitGroup
	for i, d := range ds {
		if i%2 == 0 {
			wg.Add(1)
			go func() { // settled from another goroutine
				defer wg.Done()
				assert.NoError(t, d.Ack(context.Background()))
			}()
		}
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		for _, d := range ds {
			if d.Outcome() == bus.OutcomePending {
				return false
			}
		}
		return true
	}, waitFor, time.Millisecond, "every unsettled manual delivery expires")
	for i, d := range ds {
		want := bus.OutcomeAcked
		if i%2 == 1 {
			want = bus.OutcomeLeaseLost
		}
		assert.Equal(t, want, d.Outcome(), "delivery %d", i)
	}
	assert.Len(t, ev.byScope(observer.ScopeLease), n/2, "one lease event per expired delivery")
	// The slots came back: the next message is delivered.
	f.push(msg("next", 1))
	assert.Equal(t, "next", recv(t, held).ID)
}

package observer_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/observer"
)

type recorder struct {
	mu     sync.Mutex
	events []observer.Event
}

func (r *recorder) Observe(_ context.Context, e observer.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func TestOutageReportsFirstErrorAndRecoveryOnly(t *testing.T) {
	t.Parallel()
	var o observer.Outage
	rec := &recorder{}
	ctx := context.Background()
	ev := observer.Event{Scope: observer.ScopeReclaim, Topic: "orders"}

	assert.False(t, o.Recover(ctx, rec, ev), "no outage, nothing to recover")
	assert.True(t, o.Fail(ctx, rec, ev, errors.New("conn refused 1")), "first error is reported")
	for range 5 {
		assert.False(t, o.Fail(ctx, rec, ev, errors.New("conn refused")), "later errors of the outage are counted only")
	}
	assert.False(t, o.Fail(ctx, rec, ev, nil), "a nil error is ignored")
	assert.True(t, o.Failing())
	assert.True(t, o.Recover(ctx, rec, ev), "the recovery is reported")
	assert.False(t, o.Failing())
	assert.False(t, o.Recover(ctx, rec, ev), "one recovery per outage")

	require.Len(t, rec.events, 2, "one error and one recovery, not a flood")
	assert.EqualError(t, rec.events[0].Err, "conn refused 1")
	assert.Equal(t, "orders", rec.events[0].Topic)
	assert.Nil(t, rec.events[1].Err, "the recovery carries no error")
	require.NotNil(t, rec.events[1].Recovery)
	assert.Equal(t, 5, rec.events[1].Recovery.Suppressed, "the hidden errors are counted")
	assert.Contains(t, rec.events[1].Recovery.String(), "5 more errors")

	assert.True(t, o.Fail(ctx, rec, ev, errors.New("again")), "a new outage reports again")
	assert.Len(t, rec.events, 3)
}

package inmemory

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// receiveWhenBlocked starts a Receive of one message on s, waits until it
// blocks on the group, runs act, and returns what the Receive got and how
// long it took after act.
func receiveWhenBlocked(t *testing.T, s *Subscription, act func()) ([]*backend.Message, time.Duration) {
	t.Helper()
	type result struct {
		ms  []*backend.Message
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		ms, err := s.Receive(context.Background(), 1)
		got <- result{ms, err, time.Now()}
	}()
	require.Eventually(t, func() bool {
		s.t.lock()
		defer s.t.unlock()
		return s.g.sleepers > 0
	}, 5*time.Second, time.Millisecond, "the Receive blocks")
	begin := time.Now()
	act()
	select {
	case r := <-got:
		require.NoError(t, r.err, "receive")
		return r.ms, r.at.Sub(begin)
	case <-time.After(5 * time.Second):
		t.Fatal("the Receive did not return")
		return nil, 0
	}
}

// A member that woke on its own timer for a delayed nack must not leave a
// planned wake-up behind that hides the next delayed nack from a blocked
// Receive (which then slept until its one-second bound).
func TestDelayedNacksInARowWakeTheBlockedReceive(t *testing.T) {
	be := newTestBackend(t, nil)
	s := subscribeGroup(t, be, "wake", "g")
	ctx := context.Background()
	require.NoError(t, be.Publish(ctx, "wake", []*backend.Message{{ID: "m", Payload: []byte("x")}}))
	ms, err := s.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	for attempt := 2; attempt <= 4; attempt++ {
		id := ms[0].AckID
		ms, _ = receiveWhenBlocked(t, s, func() { require.NoError(t, s.Nack(ctx, id, time.Millisecond), "nack") })
		require.Len(t, ms, 1, "attempt %d is delivered", attempt)
		require.Equal(t, attempt, ms[0].Attempt)
	}
	id := ms[0].AckID
	// Each Receive above woke on its own timer; this one must still be
	// woken by the delayed nack, long before its one-second bound.
	ms, took := receiveWhenBlocked(t, s, func() { require.NoError(t, s.Nack(ctx, id, time.Millisecond), "nack") })
	require.Len(t, ms, 1, "the last redelivery")
	require.Less(t, took, maxReceiveWait/2, "a 1ms delayed nack wakes the blocked Receive, not its %v bound", maxReceiveWait)
}

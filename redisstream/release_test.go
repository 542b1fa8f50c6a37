package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

func TestReleaseGivesTheEntryBackWithoutCountingTheDelivery(t *testing.T) {
	e := newStaleEnv(t)
	ctx := context.Background()
	require.NoError(t, e.be.Publish(ctx, e.topic, []*backend.Message{{ID: "a", Payload: []byte("x"), PublishedAt: time.Now()}}))
	// Each delivery is released by the subscription that received it, which
	// then hands over to the next one, as the bus does when it closes a
	// subscription.
	s := e.subscribe(300 * time.Millisecond)
	m := e.next(s)
	require.Equal(t, 1, m.Attempt, "first delivery")
	for round := 1; round <= 3; round++ {
		rel, ok := s.(backend.Releaser)
		require.True(t, ok, "redisstream subscriptions implement backend.Releaser")
		require.NoError(t, rel.Release(ctx, m.AckID), "round %d: release", round)
		_, count := e.pending()
		assert.Equal(t, int64(0), count, "round %d: the released delivery is not counted at the server", round)
		next := e.subscribe(300 * time.Millisecond)
		old := m
		m = e.next(next)
		assert.Equal(t, 1, m.Attempt, "round %d: the next delivery keeps Attempt 1", round)
		err := rel.Release(ctx, old.AckID)
		require.ErrorIs(t, err, backend.ErrStale, "round %d: releasing the earlier delivery again is stale", round)
		_, count = e.pending()
		assert.Equal(t, int64(1), count, "round %d: a stale release changes nothing", round)
		require.NoError(t, s.Close(), "round %d: close the releasing subscription", round)
		s = next
	}
	require.NoError(t, s.Ack(ctx, []backend.AckID{m.AckID}), "ack")
	consumer, _ := e.pending()
	assert.Empty(t, consumer, "nothing pending after the ack")
}

// A member that subscribed with a short ack timeout before a member with
// a long one joined reclaims by the group's lease, the longest: it does
// not take the long member's delivery after its own timeout. A nack with
// no delay and a release still make the entry claimable at once.
func TestShortMemberReclaimsByTheGroupsLongestLease(t *testing.T) {
	e := newStaleEnv(t)
	ctx := context.Background()
	short := e.subscribe(100 * time.Millisecond)
	long := e.subscribe(5 * time.Second)
	require.NoError(t, e.be.Publish(ctx, e.topic, []*backend.Message{{ID: "a", Payload: []byte("x"), PublishedAt: time.Now()}}))
	m := e.next(long)

	// Without keep-alive the entry idles; the short member polls for ten
	// of its own timeouts, a twentieth of the group's lease.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		msgs, err := short.Receive(rctx, 1)
		cancel()
		if err != nil && rctx.Err() == nil {
			require.NoError(t, err)
		}
		require.Empty(t, msgs, "the short member reclaimed an entry the long member holds within the group's lease")
	}

	require.NoError(t, long.Nack(ctx, m.AckID, 0))
	again := e.next(short)
	assert.Equal(t, "a", again.ID, "a nack without delay is claimable at once, whatever the lease")
	rel := short.(backend.Releaser)
	require.NoError(t, rel.Release(ctx, again.AckID))
	third := e.next(long)
	assert.Equal(t, "a", third.ID, "a release is claimable at once")
	require.NoError(t, long.Ack(ctx, []backend.AckID{third.AckID}))
}

package nats

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// openRequest sends a pull request for n messages that waits until it is
// full, and makes it the member's open request, as a Receive that
// returned early leaves it.
func openRequest(t *testing.T, s *jsSub, n int) {
	t.Helper()
	require.NoError(t, s.openRequest(n, pullWait, false), "pull request")
}

func publishIDs(ctx context.Context, t *testing.T, b *Backend, topic string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		require.NoError(t, b.Publish(ctx, topic, []*backend.Message{{ID: id, Payload: []byte("x")}}), "publish")
	}
}

// A Receive returns what has arrived of its request without waiting for
// the rest, Coming counts the rest, and later Receives hand it out.
func TestReceiveReturnsBeforeItsRequestIsFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "coming")
	openRequest(t, s, 5)
	publishIDs(ctx, t, b, topic, "m-0", "m-1")
	require.Eventually(t, func() bool { return len(s.in.ch) >= 2 }, 5*time.Second, time.Millisecond,
		"the first deliveries reach the inbox")

	got, err := s.Receive(ctx, 5)
	require.NoError(t, err, "receive")
	require.Len(t, got, 2, "the Receive returns what has arrived")
	assert.Equal(t, 3, s.Coming(), "the rest of the request is coming")

	publishIDs(ctx, t, b, topic, "m-2", "m-3", "m-4")
	var ids []string
	for len(ids) < 3 {
		require.GreaterOrEqual(t, 5-2-len(ids), s.Coming(), "Coming never grows")
		more, err := s.Receive(ctx, s.Coming())
		require.NoError(t, err, "receive the rest")
		require.NotEmpty(t, more, "a Receive with messages coming waits for one")
		for _, m := range more {
			ids = append(ids, m.ID)
		}
	}
	assert.Equal(t, []string{"m-2", "m-3", "m-4"}, ids, "the rest comes in order")
	assert.Zero(t, s.Coming(), "nothing is coming once the request is full")
}

// A Receive whose ctx has ended while messages are coming returns those
// that arrived, and leaves nothing coming.
func TestReceiveWithEndedCtxReturnsWhatIsComing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "coming-end")
	openRequest(t, s, 5)
	publishIDs(ctx, t, b, topic, "m-0")
	got, err := s.Receive(ctx, 5)
	require.NoError(t, err, "receive")
	require.Len(t, got, 1)
	require.Equal(t, 4, s.Coming(), "four are coming")
	require.NoError(t, s.Ack(ctx, []backend.AckID{got[0].AckID}), "ack")

	publishIDs(ctx, t, b, topic, "m-1", "m-2")
	require.Eventually(t, func() bool { return len(s.in.ch) >= 2 }, 5*time.Second, time.Millisecond,
		"the deliveries reach the inbox")
	ended, stop := context.WithCancel(ctx)
	stop()
	last, err := s.Receive(ended, s.Coming())
	require.ErrorIs(t, err, context.Canceled, "the Receive ends with its ctx")
	var ids []string
	for _, m := range last {
		ids = append(ids, m.ID)
	}
	assert.Equal(t, []string{"m-1", "m-2"}, ids, "what arrived is returned, for the bus to handle")
	assert.Zero(t, s.Coming(), "nothing is coming after a Receive whose ctx ended")

}

// With capacity beyond what is coming, a Receive asks for more with a
// second request; the server serves the older one first, and an extra
// request it refuses or ends empty is forgotten: Coming stays exact.
func TestExtraRequestKeepsComingExact(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "coming-extra")
	require.NoError(t, s.openRequest(3, pullWait, false), "pull request")
	publishIDs(ctx, t, b, topic, "m-0")
	var ids []string
	got, err := s.Receive(ctx, 3+s.maxBatch)
	require.NoError(t, err, "receive with room for an extra request")
	for _, m := range got {
		ids = append(ids, m.ID)
	}
	publishIDs(ctx, t, b, topic, "m-1", "m-2", "m-3", "m-4")
	for len(ids) < 5 {
		more, err := s.Receive(ctx, max(s.Coming(), 1))
		require.NoError(t, err, "receive the rest")
		for _, m := range more {
			ids = append(ids, m.ID)
		}
	}
	assert.Equal(t, []string{"m-0", "m-1", "m-2", "m-3", "m-4"}, ids, "each message once, in order")
	for s.Coming() > 0 {
		more, err := s.Receive(ctx, s.Coming())
		require.NoError(t, err, "receive until the requests end")
		assert.Empty(t, more, "nothing more was published")
	}
	assert.Empty(t, s.open, "no request is open once nothing is coming")
}

// A member that closes while the messages of its pull request are still
// coming leaves them pending at the server until their AckWait (no
// Receive collects them): UnlockGroup lets its group lock lapse, so that
// the next holder takes it over and waits for them. A member whose
// request ended releases the lock.
func TestCloseWithMessagesComingLetsTheLockLapse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, coming := range []bool{true, false} {
		b, s, topic := newInternalSub(ctx, t, fmt.Sprint("lapse", coming))
		held, _, err := b.LockGroup(ctx, topic, s.cfg.Group, "leaving", time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		n := 2
		if coming {
			n = 5
		}
		openRequest(t, s, n)
		publishIDs(ctx, t, b, topic, "m-0", "m-1")
		require.Eventually(t, func() bool { return len(s.in.ch) >= 2 }, 5*time.Second, time.Millisecond,
			"the first deliveries reach the inbox")
		got, err := s.Receive(ctx, n)
		require.NoError(t, err, "receive")
		require.Len(t, got, 2)
		ids := make([]backend.AckID, 0, len(got))
		for _, m := range got {
			ids = append(ids, m.AckID)
		}
		require.NoError(t, s.Ack(ctx, ids))
		assert.Equal(t, n-2, s.Coming(), "coming %v", coming)
		require.NoError(t, s.Close())
		require.NoError(t, b.UnlockGroup(ctx, topic, s.cfg.Group, "leaving"))
		held, takeover, err := b.LockGroup(ctx, topic, s.cfg.Group, "next", time.Minute)
		require.NoError(t, err)
		require.True(t, held, "the leaving member's lock is free")
		assert.Equal(t, coming, takeover, "the next holder takes the lock over when messages were coming")
	}
}

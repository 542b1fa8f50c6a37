package rabbitmq_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testCloseCountsUnsettled: a member that is not key-ordered closes with
// one message received and unsettled and the others pushed to it or
// queued; the next member gets the unsettled one on its second attempt
// (its handler may have run) and the others on their first.
func testCloseCountsUnsettled(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, err := url.Parse(node.URL())
	require.NoError(t, err)
	b, err := rabbitmq.OpenURL(ctx, u)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	const topic, group, n = "close.unsettled", "g", 4
	cfg := backend.SubscribeConfig{Group: group, AckTimeout: time.Minute, MaxInFlight: 8, Observer: observer.Nop()}
	s1, err := b.Subscribe(ctx, topic, cfg)
	require.NoError(t, err)
	msgs := make([]*backend.Message, n)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: fmt.Sprintf("m%d", i), Payload: []byte{byte(i)}, PublishedAt: time.Now()}
	}
	require.NoError(t, b.Publish(ctx, topic, msgs))
	var got []*backend.Message
	for len(got) == 0 {
		got, err = s1.Receive(ctx, 1)
		require.NoError(t, err)
	}
	require.NoError(t, s1.Close(), "one received and unsettled, the rest pushed or queued")

	s2, err := b.Subscribe(ctx, topic, cfg)
	require.NoError(t, err)
	defer s2.Close()
	attempts := map[string]int{}
	for len(attempts) < n {
		ms, err := s2.Receive(ctx, n)
		require.NoError(t, err)
		ids := make([]backend.AckID, 0, len(ms))
		for _, m := range ms {
			attempts[m.ID] = m.Attempt
			ids = append(ids, m.AckID)
		}
		require.NoError(t, s2.Ack(ctx, ids))
	}
	want := map[string]int{}
	for _, m := range msgs {
		want[m.ID] = 1
	}
	want[got[0].ID] = 2
	assert.Equal(t, want, attempts, "the unsettled message counts an attempt, the ones Receive did not return do not")
}

// testUnlockOnEndedCtxLapses: an unlock whose ctx has ended does not
// release the lock: the lock stays held until its ttl passes, and the
// next holder then takes it over.
func testUnlockOnEndedCtxLapses(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, err := url.Parse(node.URL())
	require.NoError(t, err)
	open := func() *rabbitmq.Backend {
		b, err := rabbitmq.OpenURL(ctx, u)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b1, b2 := open(), open()
	const topic, group, ttl = "unlock.ended", "g", 2 * time.Second
	held, _, err := b1.LockGroup(ctx, topic, group, "one", ttl)
	require.NoError(t, err)
	require.True(t, held, "the first holder takes the lock")
	ended, end := context.WithCancel(ctx)
	end()
	require.ErrorIs(t, b1.UnlockGroup(ended, topic, group, "one"), context.Canceled, "an unlock on an ended ctx")
	held, _, err = b2.LockGroup(ctx, topic, group, "two", ttl)
	require.NoError(t, err)
	assert.False(t, held, "the lock is still the first holder's")
	var takeover bool
	require.Eventually(t, func() bool {
		held, takeover, err = b2.LockGroup(ctx, topic, group, "two", ttl)
		return err == nil && held
	}, 30*time.Second, 50*time.Millisecond, "the lock lapses after its ttl")
	assert.True(t, takeover, "a lapsed lock is taken over")
}

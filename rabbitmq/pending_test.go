package rabbitmq_test

import (
	"context"
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

// testPendingDeliveries checks what PendingDeliveries promises: max below
// 1 is refused before any I/O; the list is the deliveries this process's
// members hold, in delivery order, with their keys and lease ends, and
// complete; while a member of another process consumes from the group's
// queue it is an error; once that member's channel is gone the list is
// complete again.
func testPendingDeliveries(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func() *rabbitmq.Backend {
		u, err := url.Parse(node.URL())
		require.NoError(t, err)
		b, err := rabbitmq.OpenURL(ctx, u)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b, other := open(), open()
	cfg := backend.SubscribeConfig{Group: "g", AckTimeout: time.Minute, MaxInFlight: 4, Observer: observer.Nop()}
	sub, err := b.Subscribe(ctx, "pending", cfg)
	require.NoError(t, err)
	pl := sub.(backend.PendingLister)

	_, _, err = pl.PendingDeliveries(ctx, 0)
	require.ErrorIs(t, err, backend.ErrInvalidOption)

	ps, complete, err := pl.PendingDeliveries(ctx, 10)
	require.NoError(t, err)
	assert.True(t, complete)
	assert.Empty(t, ps)

	require.NoError(t, b.Publish(ctx, "pending", []*backend.Message{
		{ID: "p-0", Key: "a", Payload: []byte("0"), PublishedAt: time.Now()},
		{ID: "p-1", Key: "b", Payload: []byte("1"), PublishedAt: time.Now()},
	}))
	var got []*backend.Message
	for len(got) < 2 {
		ms, err := sub.Receive(ctx, 2)
		require.NoError(t, err)
		got = append(got, ms...)
	}
	received := time.Now()
	ps, complete, err = pl.PendingDeliveries(ctx, 10)
	require.NoError(t, err)
	assert.True(t, complete)
	require.Len(t, ps, 2)
	assert.Equal(t, []string{"p-0", "p-1"}, []string{ps[0].ID, ps[1].ID}, "in delivery order")
	assert.Equal(t, []string{"a", "b"}, []string{ps[0].Key, ps[1].Key})
	assert.WithinDuration(t, received.Add(time.Minute), ps[0].LeaseEnd, 10*time.Second)
	ps, complete, err = pl.PendingDeliveries(ctx, 1)
	require.NoError(t, err)
	assert.False(t, complete, "more than max")
	assert.Len(t, ps, 1)
	require.NoError(t, sub.Ack(ctx, []backend.AckID{got[0].AckID, got[1].AckID}))

	// A member of another process consumes: what it holds is not known.
	osub, err := other.Subscribe(ctx, "pending", cfg)
	require.NoError(t, err)
	ms, err := osub.Receive(ctx, 1) // opens its consumer, and waits a second for nothing
	require.NoError(t, err)
	require.Empty(t, ms)
	_, _, err = pl.PendingDeliveries(ctx, 10)
	require.Error(t, err, "another process consumes")
	require.NoError(t, osub.Close())
	require.Eventually(t, func() bool {
		_, complete, err := pl.PendingDeliveries(ctx, 10)
		return err == nil && complete
	}, 10*time.Second, 20*time.Millisecond, "complete once the other member's channel is gone")
	require.NoError(t, sub.Close())
}

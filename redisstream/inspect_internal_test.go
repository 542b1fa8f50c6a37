package redisstream

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
)

// setIdleBounds shortens liveConsumerIdle and touchEvery for one test.
func setIdleBounds(t *testing.T, idle, touch time.Duration) {
	oldIdle, oldTouch := liveConsumerIdle, touchEvery
	liveConsumerIdle, touchEvery = idle, touch
	t.Cleanup(func() { liveConsumerIdle, touchEvery = oldIdle, oldTouch })
}

func newInspectBackend(t *testing.T) (*Backend, *redis.Client, string, keys) {
	t.Helper()
	client := redis.NewClient(redistest.Options(t))
	be, err := New(client, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = be.Close() })
	topic := "live-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	k := newKeys("bus", topic)
	t.Cleanup(func() { _ = client.Del(context.Background(), k.stream, k.lease).Err() })
	return be, client, topic, k
}

func consumersOf(t *testing.T, ctx context.Context, be *Backend, topic string) backend.Figure {
	t.Helper()
	gs, err := be.Groups(ctx, topic)
	require.NoError(t, err)
	require.Len(t, gs, 1)
	return gs[0].Consumers
}

// A consumer left by a process that died without closing (kill -9) is
// idle from then on: Groups stops counting it once it is idle for longer
// than liveConsumerIdle or the group's lease, whichever is longer.
func TestGroupsDropsConsumersIdleBeyondTheBound(t *testing.T) {
	be, client, topic, k := newInspectBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, client.XGroupCreateMkStream(ctx, k.stream, "g", "$").Err())
	require.NoError(t, client.XGroupCreateConsumer(ctx, k.stream, "g", "dead").Err())
	setIdleBounds(t, time.Second, touchEvery)

	require.Eventually(t, func() bool { return consumersOf(t, ctx, be, topic) == 0 }, 10*time.Second, 50*time.Millisecond,
		"a consumer idle for longer than the bound is not counted")
	n, err := client.XInfoGroups(ctx, k.stream).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n[0].Consumers, "Redis still lists it")

	require.NoError(t, client.HSet(ctx, k.lease, "g", time.Hour.Milliseconds()).Err())
	assert.Equal(t, backend.Figure(1), consumersOf(t, ctx, be, topic), "a group whose ack timeout is longer waits that long")
	require.NoError(t, client.HDel(ctx, k.lease, "g").Err())

	err = client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{k.stream, touchID}, Count: 1, Block: -1}).Err()
	if err != nil {
		require.ErrorIs(t, err, redis.Nil)
	}
	assert.Equal(t, backend.Figure(1), consumersOf(t, ctx, be, topic), "a consumer seen again counts again")
}

// A live subscription on a quiet topic, whose blocked reads find nothing,
// keeps being counted: it tells Redis it is alive.
func TestGroupsCountsALiveSubscriptionOfAQuietTopic(t *testing.T) {
	be, _, topic, _ := newInspectBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	setIdleBounds(t, 3*time.Second, 100*time.Millisecond)
	sub, err := be.Subscribe(ctx, topic, backend.SubscribeConfig{Group: "g", AckTimeout: time.Second, MaxInFlight: 4}) // a lease under the bound
	require.NoError(t, err)
	defer sub.Close()
	// Receive until well past the bound: every read finds nothing.
	until := time.Now().Add(2 * liveConsumerIdle)
	for time.Now().Before(until) {
		ms, err := sub.Receive(ctx, 4)
		require.NoError(t, err)
		require.Empty(t, ms)
	}
	assert.Equal(t, backend.Figure(1), consumersOf(t, ctx, be, topic), "the live member is counted")
}

// The touch takes no entry, counts no delivery and leaves the lease of a
// pending entry running.
func TestTouchLeavesPendingEntriesAlone(t *testing.T) {
	_, client, _, k := newInspectBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, client.XGroupCreateMkStream(ctx, k.stream, "g", "$").Err())
	require.NoError(t, client.XAdd(ctx, &redis.XAddArgs{Stream: k.stream, Values: []any{"p", "x"}}).Err())
	require.NoError(t, client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{k.stream, ">"}, Count: 1, Block: -1}).Err())
	pending := func() redis.XPendingExt {
		p, err := client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: k.stream, Group: "g", Start: "-", End: "+", Count: 10}).Result()
		require.NoError(t, err)
		require.Len(t, p, 1)
		return p[0]
	}
	before := pending()
	res, err := client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{k.stream, touchID}, Count: 1, Block: -1}).Result()
	if err != nil {
		require.ErrorIs(t, err, redis.Nil)
	}
	for _, st := range res {
		assert.Empty(t, st.Messages, "the touch reads no entry")
	}
	after := pending()
	assert.EqualValues(t, 1, after.RetryCount, "the touch counts no delivery")
	assert.GreaterOrEqual(t, after.Idle, before.Idle, "nor restarts the lease")
}

// A group deleted between Groups' XINFO GROUPS and its calls per group
// (a broadcast group swept by another process, a DeleteGroup) is left
// out of the answer, and the call does not fail with NOGROUP.
func TestGroupsLeavesOutAGroupDeletedWhileListing(t *testing.T) {
	be, client, topic, k := newInspectBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, g := range []string{"gone", "kept"} {
		require.NoError(t, client.XGroupCreateMkStream(ctx, k.stream, g, "0").Err())
		require.NoError(t, client.XGroupCreateConsumer(ctx, k.stream, g, "c").Err())
	}
	require.NoError(t, client.XAdd(ctx, &redis.XAddArgs{Stream: k.stream, Values: []string{"p", "x"}}).Err())
	for _, g := range []string{"gone", "kept"} {
		require.NoError(t, client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: g, Consumer: "c", Streams: []string{k.stream, ">"}, Count: 1}).Err())
	}
	old := groupsListed
	t.Cleanup(func() { groupsListed = old })
	groupsListed = func(string) {
		groupsListed = func(string) {}
		require.NoError(t, client.XGroupDestroy(ctx, k.stream, "gone").Err())
	}
	gs, err := be.Groups(ctx, topic)
	require.NoError(t, err, "a group deleted while listing is not an error")
	require.Len(t, gs, 1)
	assert.Equal(t, "kept", gs[0].Name)
	assert.EqualValues(t, 1, gs[0].Pending, "the other group keeps its figures")
}

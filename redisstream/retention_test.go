package redisstream_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/redisstream"
)

// openURLBus opens a bus on url plus query, closed when the test ends.
func openURLBus(t *testing.T, url, query string, opts ...bus.Option) *bus.Bus {
	t.Helper()
	b, err := bus.Open(context.Background(), url+"?"+query, opts...)
	require.NoError(t, err, "open %s", query)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	return b
}

// publishRetained publishes n messages of 200 bytes to topic in batches of 100.
func publishRetained(t *testing.T, b *bus.Bus, topic string, n int) {
	t.Helper()
	for off := 0; off < n; off += 100 {
		batch := make([]*bus.Message, min(100, n-off))
		for i := range batch {
			batch[i] = &bus.Message{Payload: make([]byte, 200)}
		}
		require.NoError(t, b.Publish(context.Background(), topic, batch...))
	}
}

func TestPublisherTrimsWhatEveryGroupSettledWithNoSubscriber(t *testing.T) {
	ctx := context.Background()
	url := redistest.URL(t)
	client := redis.NewClient(mustParse(t, url))
	defer client.Close()
	topic := uniqueTopic(t)
	stream := "bus:{" + topic + "}"
	const n = 500
	// A group that some other process consumes with plain commands: no
	// subscription of the bus runs anywhere.
	require.NoError(t, client.XGroupCreateMkStream(ctx, stream, "g", "$").Err())
	pub := openURLBus(t, url, "trim_interval=50ms")
	publishRetained(t, pub, topic, n)
	res, err := client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{stream, ">"}, Count: n}).Result()
	require.NoError(t, err)
	ids := make([]string, 0, n)
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	require.Len(t, ids, n, "the group read every message")
	before := client.XLen(ctx, stream).Val()
	bytes := client.MemoryUsage(ctx, stream).Val()
	require.NoError(t, client.XAck(ctx, stream, "g", ids[:n-20]...).Err())
	require.Eventually(t, func() bool { return client.XLen(ctx, stream).Val() == 20 }, 10*time.Second, 10*time.Millisecond,
		"the publishing process trims every settled entry and nothing else (%d left)", client.XLen(ctx, stream).Val())
	t.Logf("settled by every group: %d entries (%d bytes) before, %d entries (%d bytes) after the publisher's trim",
		before, bytes, client.XLen(ctx, stream).Val(), client.MemoryUsage(ctx, stream).Val())
	left, err := client.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, left, 20)
	assert.Equal(t, ids[n-20], left[0].ID, "the unsettled entries are the ones kept")
}

func TestSubscriptionCloseLeavesNothingSettledBehind(t *testing.T) {
	ctx := context.Background()
	url := redistest.URL(t)
	client := redis.NewClient(mustParse(t, url))
	defer client.Close()
	topic := uniqueTopic(t)
	stream := "bus:{" + topic + "}"
	const n = 400
	// Neither process trims on its timer during the test: only Close does.
	cons := openURLBus(t, url, "trim_interval=1h")
	pub := openURLBus(t, url, "trim_interval=1h")
	var handled atomic.Int64
	sub, err := cons.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
		handled.Add(1)
		return nil
	}, bus.WithGroup("g"), bus.WithStartFrom(backend.StartOldest))
	require.NoError(t, err)
	publishRetained(t, pub, topic, n)
	require.Eventually(t, func() bool { return handled.Load() == n }, 10*time.Second, 10*time.Millisecond, "every message handled")
	before := client.XLen(ctx, stream).Val()
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, sub.Close(closeCtx))
	after := client.XLen(ctx, stream).Val()
	t.Logf("a consumer that settled everything and closed: %d entries before Close, %d after", before, after)
	assert.Equal(t, int64(n), before, "nothing trimmed before Close")
	assert.Zero(t, after, "Close trims what every group settled")
}

func TestNoGroupTopicIsKeptUntilAGroupExists(t *testing.T) {
	ctx := context.Background()
	url := redistest.URL(t)
	client := redis.NewClient(mustParse(t, url))
	defer client.Close()
	topic := uniqueTopic(t)
	pub := openURLBus(t, url, "trim_interval=20ms")
	publishRetained(t, pub, topic, 100)
	require.Never(t, func() bool { return client.XLen(ctx, "bus:{"+topic+"}").Val() < 100 }, 200*time.Millisecond, 20*time.Millisecond,
		"a topic with no group keeps its messages for the group that comes")
}

// trimmedTopic is a client of a private server, a backend on it that
// trims every 20 ms, a Bus on the backend and a new topic.
func trimmedTopic(t *testing.T) (*redis.Client, *redisstream.Backend, *bus.Bus, string) {
	t.Helper()
	url := redistest.URL(t)
	client := redis.NewClient(mustParse(t, url))
	t.Cleanup(func() { _ = client.Close() })
	be := newBackend(t, redis.NewClient(mustParse(t, url)), &redisstream.Options{TrimInterval: 20 * time.Millisecond})
	b := bus.New(be)
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return client, be, b, uniqueTopic(t)
}

func TestBoundRetentionCapsAStreamWithNoGroupByLength(t *testing.T) {
	ctx := context.Background()
	client, be, b, topic := trimmedTopic(t)
	stream := "bus:{" + topic + "}"
	const bound = 300
	require.NoError(t, be.BoundRetention(ctx, topic, backend.RetentionBound{MaxLen: bound}))
	for range 30 {
		publishRetained(t, b, topic, 100)
		// Approximate trimming keeps up to one more stream node (100
		// entries by default).
		require.LessOrEqual(t, client.XLen(ctx, stream).Val(), int64(bound+100), "the stream stays within its bound after each publish")
	}
	t.Logf("3000 published to a topic bounded at %d entries: %d kept (%d bytes)", bound, client.XLen(ctx, stream).Val(), client.MemoryUsage(ctx, stream).Val())
}

func TestBoundRetentionDropsEntriesPastMaxAge(t *testing.T) {
	ctx := context.Background()
	client, be, b, topic := trimmedTopic(t)
	stream := "bus:{" + topic + "}"
	require.NoError(t, be.BoundRetention(ctx, topic, backend.RetentionBound{MaxAge: 100 * time.Millisecond}))
	publishRetained(t, b, topic, 500)
	require.Eventually(t, func() bool { return client.XLen(ctx, stream).Val() == 0 }, 10*time.Second, 10*time.Millisecond,
		"entries past the bound's age are dropped with no group and no subscriber (%d left)", client.XLen(ctx, stream).Val())
}

func TestEventsTopicStaysWithinItsBound(t *testing.T) {
	ctx := context.Background()
	url := redistest.URL(t)
	client := redis.NewClient(mustParse(t, url))
	defer client.Close()
	topic, events := uniqueTopic(t), uniqueTopic(t)
	const bound = 20
	b := openURLBus(t, url, "trim_interval=20ms", bus.WithEvents(events), bus.WithEventsRetention(time.Hour, bound))
	var handled atomic.Int64
	_, err := b.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
		handled.Add(1)
		return nil
	}, bus.WithStartFrom(backend.StartOldest))
	require.NoError(t, err)
	const n = 3000
	for i := range n {
		require.NoError(t, b.Publish(ctx, topic, &bus.Message{Payload: []byte(fmt.Sprint(i))}))
		if i%100 == 99 {
			// Let the handler catch up, so the events come in many batches.
			require.Eventually(t, func() bool { return handled.Load() == int64(i+1) }, 10*time.Second, time.Millisecond)
		}
	}
	require.Eventually(t, func() bool { return client.XLen(ctx, "bus:{"+events+"}").Val() > 0 }, 10*time.Second, 10*time.Millisecond, "events are written")
	got := client.XLen(ctx, "bus:{"+events+"}").Val()
	t.Logf("events topic bounded at %d messages after %d deliveries: %d messages", bound, n, got)
	assert.LessOrEqual(t, got, int64(bound+100), "the events topic stays within its bound and one stream node")
}

func mustParse(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	require.NoError(t, err)
	return o
}

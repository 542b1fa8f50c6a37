package redisstream_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/redisstream"
)

// TestConformance runs the suite against $BUS_REDIS_URL when set,
// otherwise against a private redis-server.
func TestConformance(t *testing.T) {
	u := redistest.URL(t)
	opts, err := redis.ParseURL(u)
	require.NoError(t, err, "parse the test server URL")
	conformance.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, redis.NewClient(opts), nil)
	})
}

// TestMeasureCrash measures a kill of a key-ordered member with the
// default ack timeout (only with BUS_MEASURE_CRASH set).
func TestMeasureCrash(t *testing.T) {
	if os.Getenv(conformance.MeasureCrashEnv) == "" {
		t.Skipf("set %s to measure a crash", conformance.MeasureCrashEnv)
	}
	u := redistest.URL(t)
	opts, err := redis.ParseURL(u)
	require.NoError(t, err, "parse the test server URL")
	nb := func(t testing.TB) backend.Backend { return newBackend(t, redis.NewClient(opts), nil) }
	t.Run("Locked", func(t *testing.T) { conformance.MeasureCrash(t, nb, 1) })
	t.Run("Partitioned", func(t *testing.T) { conformance.MeasureCrash(t, nb, 4) })
}

// TestConformanceCluster runs the suite against a private 3-master Redis
// Cluster.
func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster conformance is long; run without -short")
	}
	c := redistest.StartCluster(t, 3)
	conformance.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()}), nil)
	})
	t.Run("DeadLetterToTopicInAnotherSlot", func(t *testing.T) {
		testDeadLetterAcrossSlots(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()}))
	})
	t.Run("OpenURL", func(t *testing.T) {
		b, err := bus.Open(context.Background(), c.URL())
		require.NoError(t, err, "open a cluster by URL")
		require.NoError(t, b.Close(context.Background()))
	})
}

// testDeadLetterAcrossSlots rejects a message into a dead-letter topic
// whose stream hashes to another cluster slot (so no script can cover both
// keys) and checks it lands there once and leaves the source settled.
func testDeadLetterAcrossSlots(t *testing.T, client *redis.ClusterClient) {
	ctx := context.Background()
	b := bus.New(newBackend(t, client, nil))
	defer b.Close(ctx)
	topic, dlq := uniqueTopic(t), uniqueTopic(t)+"-elsewhere"
	require.NotEqual(t, client.ClusterKeySlot(ctx, "bus:{"+topic+"}").Val(), client.ClusterKeySlot(ctx, "bus:{"+dlq+"}").Val(),
		"the two streams must live in different slots for this case")
	got := make(chan struct{}, 1)
	sub, err := b.Subscribe(ctx, topic, func(ctx context.Context, d *bus.Delivery) error {
		defer func() { got <- struct{}{} }()
		return d.Reject(ctx, errors.New("bad order"))
	}, bus.WithGroup("g"), bus.WithAckMode(bus.AckManual), bus.WithDeadLetter(dlq))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "m1", Payload: []byte("x")}))
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
	require.NoError(t, sub.Close(ctx))
	entries, err := client.XRange(ctx, "bus:{"+dlq+"}", "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 1, "the rejected message is in the dead-letter topic once")
	assert.Equal(t, "x", entries[0].Values["p"])
	p, err := client.XPending(ctx, "bus:{"+topic+"}", "g").Result()
	require.NoError(t, err)
	assert.Zero(t, p.Count, "the original is acked")
}

// newBackend returns a backend over client; the client is closed when the
// test ends (the backend never closes a client it was given).
func newBackend(t testing.TB, client redis.UniversalClient, opts *redisstream.Options) *redisstream.Backend {
	t.Helper()
	require.NoError(t, client.Ping(context.Background()).Err(), "ping redis")
	b, err := redisstream.New(client, opts)
	require.NoError(t, err, "redisstream.New")
	t.Cleanup(func() { _ = client.Close() })
	return b
}

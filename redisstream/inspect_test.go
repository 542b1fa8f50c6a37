package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/redisstream"
)

// A member counts as soon as it subscribed, not from its first delivery:
// on Redis 7.0 a read that finds nothing does not create the consumer.
func TestGroupsCountAMemberThatReceivedNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, redistest.URL(t), bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	defer b.Close(ctx)
	for i := 1; i <= 2; i++ {
		_, err = b.Subscribe(ctx, "idle", func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup("g"))
		require.NoError(t, err)
		gs, err := b.Groups(ctx, "idle")
		require.NoError(t, err)
		require.Len(t, gs, 1)
		assert.EqualValues(t, i, gs[0].Consumers, "%d idle member(s) count at once", i)
	}
}

// DeleteTopic removes every key the topic owns, its groups' lock keys
// included (the last holder's has no ttl), and leaves other topics' keys
// alone.
func TestDeleteTopicRemovesEveryKeyOfTheTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := redis.NewClient(&redis.Options{Addr: redistest.Start(t).Addr()})
	defer client.Close()
	be, err := redisstream.New(client, &redisstream.Options{Prefix: "deltest"})
	require.NoError(t, err)
	defer be.Close()
	for _, topic := range []string{"doomed", "kept"} {
		require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: "m-" + topic, Payload: []byte("x")}}))
		held, _, err := be.LockGroup(ctx, topic, "g", "holder-1", time.Minute)
		require.NoError(t, err)
		require.True(t, held, "the lock is taken, and its holder dies holding it")
	}
	keysOf := func(topic string) []string {
		keys, err := client.Keys(ctx, "deltest:{"+topic+"}*").Result()
		require.NoError(t, err)
		return keys
	}
	require.NotEmpty(t, keysOf("doomed"))
	require.NoError(t, be.DeleteTopic(ctx, "doomed"))
	assert.Empty(t, keysOf("doomed"), "no key of the deleted topic is left")
	assert.NotEmpty(t, keysOf("kept"), "the other topic keeps its keys")
}

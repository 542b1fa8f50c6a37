package redisstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
)

// A closed broadcast subscription leaves no key, field or member of its
// group: not the consumer group, its field of the lease hash, the hold
// of a message it nacked for an hour, nor its lock, last holder and
// place in the lock registry.
func TestBroadcastCloseLeavesNoKeys(t *testing.T) {
	ctx := context.Background()
	opts, err := redis.ParseURL(redistest.URL(t))
	require.NoError(t, err)
	raw := redis.NewClient(opts)
	t.Cleanup(func() { _ = raw.Close() })
	b := bus.New(newBackend(t, redis.NewClient(opts), nil), bus.WithObserver(observer.Nop()))
	t.Cleanup(func() { _ = b.Close(ctx) })
	topic := uniqueTopic(t)

	retried := make(chan struct{}, 1)
	sub, err := b.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
		select {
		case retried <- struct{}{}:
		default:
		}
		return bus.Nack(errors.New("later"), time.Hour)
	}, bus.WithBroadcast(), bus.WithAckTimeout(time.Second))
	require.NoError(t, err)
	group := sub.Group()
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{Payload: []byte("x")}))
	select {
	case <-retried:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not run")
	}
	stream := "bus:{" + topic + "}"
	require.Eventually(t, func() bool { return raw.ZCard(ctx, stream+"#hold").Val() == 1 }, 10*time.Second, 20*time.Millisecond,
		"the message nacked for an hour is held")
	require.Equal(t, int64(1), raw.Exists(ctx, stream+"#lock:"+group).Val(), "the group's lease is its lock")

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, sub.Close(cctx))

	groups, err := raw.XInfoGroups(ctx, stream).Result()
	require.NoError(t, err)
	require.Empty(t, groups, "no consumer group is left")
	require.False(t, raw.HExists(ctx, stream+"#lease", group).Val(), "no field of the lease hash is left")
	require.Zero(t, raw.ZCard(ctx, stream+"#hold").Val(), "no hold is left")
	require.Zero(t, raw.HLen(ctx, stream+"#held").Val(), "no hold index field is left")
	require.Zero(t, raw.Exists(ctx, stream+"#lock:"+group, stream+"#lockby:"+group).Val(), "no lock or last holder key is left")
	require.Equal(t, redis.Nil, raw.ZScore(ctx, stream+"#locks", group).Err(), "the group left the lock registry")
}

package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/broadcasttest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
)

// TestBroadcastKilledProcess: three processes subscribe in broadcast and
// one is SIGKILLed mid-stream; the live ones get every message, and
// within 1.5 times the expiry the dead one's consumer group, its pending
// entries, lease field and group lock are gone from Redis (XINFO GROUPS,
// the key space).
func TestBroadcastKilledProcess(t *testing.T) {
	u := redistest.URL(t)
	opts, err := redis.ParseURL(u)
	require.NoError(t, err)
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	broadcasttest.Run(t, broadcasttest.Config{
		URL:    u,
		Topic:  uniqueTopic(t),
		Expiry: 3 * time.Second,
		Leftovers: func(ctx context.Context, topic, group string) ([]string, error) {
			return redisLeftovers(ctx, client, topic, group)
		},
	})
}

// redisLeftovers lists what Redis holds of group on topic (whose stream
// key is bus:{topic}): the group in XINFO GROUPS, its field of the lease
// hash, its entry in the lock registry, and any key named after it.
func redisLeftovers(ctx context.Context, c *redis.Client, topic, group string) ([]string, error) {
	stream := "bus:{" + topic + "}"
	var left []string
	infos, err := c.XInfoGroups(ctx, stream).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("XINFO GROUPS %s: %w", stream, err)
	}
	for _, g := range infos {
		if g.Name == group {
			left = append(left, fmt.Sprintf("XINFO GROUPS: %s with %d consumers, %d pending", g.Name, g.Consumers, g.Pending))
		}
	}
	if ok, err := c.HExists(ctx, stream+"#lease", group).Result(); err != nil {
		return nil, err
	} else if ok {
		left = append(left, "its field of "+stream+"#lease")
	}
	if _, err := c.ZScore(ctx, stream+"#locks", group).Result(); err == nil {
		left = append(left, "its entry in "+stream+"#locks")
	} else if !errors.Is(err, redis.Nil) {
		return nil, err
	}
	keys, err := c.Keys(ctx, "*"+group+"*").Result()
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		left = append(left, "key "+k)
	}
	return left, nil
}

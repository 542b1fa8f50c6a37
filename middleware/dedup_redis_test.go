package middleware

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/redistest"
)

func redisClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	opt, err := redis.ParseURL(redistest.URL(t))
	require.NoError(t, err, "parse redis url")
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedisStoreStates(t *testing.T) {
	ctx := context.Background()
	c := redisClient(t)
	prefix := "test:dedup:" + t.Name() + ":" + time.Now().Format("150405.000000000") + ":"
	t.Cleanup(func() { c.Del(context.Background(), prefix+"k") })
	s := NewRedisStore(c, prefix)

	st, err := s.Begin(ctx, "k", "t1", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, DedupClaimed, st, "SET NX on a free key claims it")
	ttl, err := c.PTTL(ctx, prefix+"k").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 50*time.Second, "the claim carries the lease as TTL")

	st, err = s.Begin(ctx, "k", "t2", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, DedupBusy, st, "a held claim is busy")

	require.NoError(t, s.Abort(ctx, "k", "t2"))
	st, _ = s.Begin(ctx, "k", "t3", time.Minute)
	assert.Equal(t, DedupBusy, st, "abort with another token leaves the claim")

	require.NoError(t, s.Abort(ctx, "k", "t1"))
	st, _ = s.Begin(ctx, "k", "t4", time.Minute)
	assert.Equal(t, DedupClaimed, st, "abort with the holder's token frees the key")

	require.NoError(t, s.Commit(ctx, "k", time.Hour))
	st, _ = s.Begin(ctx, "k", "t5", time.Minute)
	assert.Equal(t, DedupDone, st, "a committed key is done")
	ttl, err = c.PTTL(ctx, prefix+"k").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 59*time.Minute, "the commit carries the TTL")
}

func TestRedisStoreClaimExpiresAfterLease(t *testing.T) {
	ctx := context.Background()
	c := redisClient(t)
	prefix := "test:dedup:" + t.Name() + ":" + time.Now().Format("150405.000000000") + ":"
	t.Cleanup(func() { c.Del(context.Background(), prefix+"k") })
	s := NewRedisStore(c, prefix)

	st, err := s.Begin(ctx, "k", "t1", 20*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, DedupClaimed, st)
	require.Eventually(t, func() bool {
		st, err := s.Begin(ctx, "k", "t2", time.Minute)
		return err == nil && st == DedupClaimed
	}, 5*time.Second, 10*time.Millisecond, "a claim whose holder vanished frees itself after the lease")
}

func TestDedupWithRedisStoreSharedByTwoBuses(t *testing.T) {
	c := redisClient(t)
	prefix := "test:dedup:" + t.Name() + ":" + time.Now().Format("150405.000000000") + ":"
	t.Cleanup(func() { c.Del(context.Background(), prefix+"default/m-1") })
	var calls counter
	h := func(ctx context.Context, d *bus.Delivery) error { calls.inc(); return nil }

	// Two buses stand for two processes that share the Redis store.
	for range 2 {
		b := testBus(t)
		rec, settled := recordOutcomes()
		subscribe(t, b, "orders", h, bus.WithMiddleware(rec, Dedup(NewRedisStore(c, prefix))))
		publish(t, b, "orders", &bus.Message{ID: "m-1"})
		assert.Equal(t, bus.OutcomeAcked, nextSettlement(t, settled).outcome, "each copy is acked")
	}
	assert.Equal(t, 1, calls.get(), "the second process skipped the message the first handled")
}

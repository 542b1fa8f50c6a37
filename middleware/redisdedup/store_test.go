package redisdedup_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/middleware"
	"github.com/eventbus-go/bus/middleware/redisdedup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func redisClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(redistest.Options(t))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testPrefix(t *testing.T) string {
	return "test:dedup:" + t.Name() + ":" + time.Now().Format("150405.000000000") + ":"
}

func TestStoreStates(t *testing.T) {
	ctx := context.Background()
	c := redisClient(t)
	prefix := testPrefix(t)
	t.Cleanup(func() { c.Del(context.Background(), prefix+"k") })
	s := redisdedup.New(c, prefix)

	st, err := s.Begin(ctx, "k", "t1", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, middleware.DedupClaimed, st, "SET NX on a free key claims it")
	ttl, err := c.PTTL(ctx, prefix+"k").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 50*time.Second, "the claim carries the lease as TTL")

	st, err = s.Begin(ctx, "k", "t2", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, middleware.DedupBusy, st, "a held claim is busy for another token")

	require.NoError(t, s.Abort(ctx, "k", "t2"), "abort with a foreign token")
	st, err = s.Begin(ctx, "k", "t3", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, middleware.DedupBusy, st, "an abort with a foreign token leaves the claim")

	require.NoError(t, s.Abort(ctx, "k", "t1"), "abort with the owner's token")
	st, err = s.Begin(ctx, "k", "t4", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, middleware.DedupClaimed, st, "the owner's abort frees the key")

	require.NoError(t, s.Commit(ctx, "k", time.Hour))
	st, err = s.Begin(ctx, "k", "t5", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, middleware.DedupDone, st, "a committed key is done")
	ttl, err = c.PTTL(ctx, prefix+"k").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 59*time.Minute, "the commit carries the TTL")
}

func TestStoreClaimExpiresAfterLease(t *testing.T) {
	ctx := context.Background()
	c := redisClient(t)
	prefix := testPrefix(t)
	t.Cleanup(func() { c.Del(context.Background(), prefix+"k") })
	s := redisdedup.New(c, prefix)

	st, err := s.Begin(ctx, "k", "t1", 20*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, middleware.DedupClaimed, st)
	require.Eventually(t, func() bool {
		st, err := s.Begin(ctx, "k", "t2", time.Minute)
		return err == nil && st == middleware.DedupClaimed
	}, 5*time.Second, 10*time.Millisecond, "a claim whose holder vanished frees itself after the lease")
}

func TestDedupWithStoreSharedByTwoBuses(t *testing.T) {
	c := redisClient(t)
	prefix := testPrefix(t)
	t.Cleanup(func() { c.Del(context.Background(), prefix+"default/m-1") })
	var calls atomic.Int32
	h := func(ctx context.Context, d *bus.Delivery) error { calls.Add(1); return nil }

	// Two buses stand for two processes that share the Redis store.
	for i := range 2 {
		be, err := inmemory.New(nil)
		require.NoError(t, err, "inmemory backend %d", i)
		b := bus.New(be)
		settled := make(chan bus.Outcome, 1)
		outcome := func(next bus.Handler) bus.Handler {
			return func(ctx context.Context, d *bus.Delivery) error {
				d.OnSettle(func(o bus.Outcome, _ error) { settled <- o })
				return next(ctx, d)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = b.Subscribe(ctx, "orders", h, bus.WithMiddleware(outcome, middleware.Dedup(redisdedup.New(c, prefix))))
		require.NoError(t, err, "subscribe %d", i)
		require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "m-1"}), "publish %d", i)
		select {
		case o := <-settled:
			assert.Equal(t, bus.OutcomeAcked, o, "copy %d is acked", i)
		case <-ctx.Done():
			t.Fatalf("copy %d was not settled within 10s", i)
		}
		require.NoError(t, b.Close(ctx), "close bus %d", i)
		cancel()
	}
	assert.Equal(t, int32(1), calls.Load(), "the second process skipped the message the first handled")
}

package redisstream

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
)

// internalSub is a subscription of group "g" to a new topic named after
// prefix, from the oldest entry, with its client, its backend and a ctx
// of 20s; the test's cleanup closes them and deletes the topic's keys.
type internalSub struct {
	client *redis.Client
	b      *Backend
	s      *subscription
	topic  string
	ctx    context.Context
}

func newInternalSub(t *testing.T, prefix string, ackTimeout time.Duration, maxDeliveries int) *internalSub {
	t.Helper()
	client := redis.NewClient(redistest.Options(t))
	t.Cleanup(func() { _ = client.Close() })
	b, err := New(client, nil)
	require.NoError(t, err, "new backend")
	t.Cleanup(func() { _ = b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	topic := prefix + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	bsub, err := b.Subscribe(ctx, topic, backend.SubscribeConfig{
		Group: "g", AckTimeout: ackTimeout, MaxInFlight: 10, MaxDeliveries: maxDeliveries,
		StartFrom: backend.StartOldest, Observer: observer.Nop(),
	})
	require.NoError(t, err, "subscribe")
	s := bsub.(*subscription)
	t.Cleanup(func() { _ = s.Close() })
	t.Cleanup(func() {
		_ = client.Del(context.Background(), s.keys.stream, s.keys.hold, s.keys.held, s.keys.lease).Err()
	})
	return &internalSub{client: client, b: b, s: s, topic: topic, ctx: ctx}
}

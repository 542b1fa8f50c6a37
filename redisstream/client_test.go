package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/redisstream"
)

// An application that already has a go-redis client (single, sentinel or
// cluster) gives it to New; bus.Open(ctx, "redis://host:6379/0") builds
// the client from a URL instead.
func TestNewWithTheApplicationsClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := redis.NewClient(redistest.Options(t))
	defer client.Close()

	be, err := redisstream.New(client, &redisstream.Options{Prefix: "shop:"})
	require.NoError(t, err, "New over the application's client")
	b := bus.New(be)
	defer func() { require.NoError(t, b.Close(ctx), "close the bus") }()

	got := make(chan string, 1)
	_, err = b.Subscribe(ctx, "orders.created", func(ctx context.Context, d *bus.Delivery) error {
		got <- string(d.Payload)
		return nil
	}, bus.WithGroup("billing"))
	require.NoError(t, err, "subscribe")
	require.NoError(t, b.Publish(ctx, "orders.created", &bus.Message{Payload: []byte("paid")}), "publish")
	select {
	case p := <-got:
		require.Equal(t, "paid", p, "the handler gets the payload")
	case <-ctx.Done():
		t.Fatal("the message was not delivered")
	}
	keys, err := client.Keys(ctx, "shop:*").Result()
	require.NoError(t, err, "list keys")
	require.NotEmpty(t, keys, "the backend's keys carry the prefix")
}

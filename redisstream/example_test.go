package redisstream_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/redisstream"
)

// Use a go-redis client the application already has (single, sentinel or
// cluster). The example needs a Redis server, so it is compiled but not
// run by go test; bus.Open(ctx, "redis://host:6379/0") builds the client
// from a URL instead.
func ExampleNew() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()

	be, err := redisstream.New(client, &redisstream.Options{Prefix: "shop:"})
	if err != nil {
		panic(err)
	}
	b := bus.New(be)
	defer b.Close(ctx)

	got := make(chan string, 1)
	_, err = b.Subscribe(ctx, "orders.created", func(ctx context.Context, d *bus.Delivery) error {
		got <- string(d.Payload)
		return nil
	}, bus.WithGroup("billing"))
	if err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "orders.created", &bus.Message{Payload: []byte("paid")}); err != nil {
		panic(err)
	}
	fmt.Println(<-got)
}

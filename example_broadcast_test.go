package bus_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/eventbus-go/bus"
)

// Cache invalidation: every process keeps a cache and must drop an entry
// whichever process changed it, so each subscribes in broadcast and gets
// every message. Its group is its own, and goes when it closes.
func ExampleWithBroadcast() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	invalidated := make(chan string, 2)
	var subs []*bus.Subscription
	for _, process := range []string{"api-1", "api-2"} {
		sub, err := b.Subscribe(ctx, "cache.invalidate", func(_ context.Context, d *bus.Delivery) error {
			invalidated <- process + " drops " + string(d.Payload)
			return nil
		}, bus.WithBroadcast())
		if err != nil {
			panic(err)
		}
		subs = append(subs, sub)
	}

	if err := b.Publish(ctx, "cache.invalidate", &bus.Message{Payload: []byte("user:42")}); err != nil {
		panic(err)
	}
	got := []string{<-invalidated, <-invalidated}
	if got[0] > got[1] {
		got[0], got[1] = got[1], got[0]
	}
	fmt.Println(got[0])
	fmt.Println(got[1])
	fmt.Println(strings.HasPrefix(subs[0].Group(), "_broadcast."), subs[0].Group() != subs[1].Group())

	for _, sub := range subs {
		if err := sub.Close(ctx); err != nil {
			panic(err)
		}
	}
	groups, err := b.Groups(ctx, "cache.invalidate")
	if err != nil {
		panic(err)
	}
	fmt.Println("groups left:", len(groups))
	// Output:
	// api-1 drops user:42
	// api-2 drops user:42
	// true true
	// groups left: 0
}

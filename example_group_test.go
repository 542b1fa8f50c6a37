package bus_test

import (
	"context"
	"fmt"

	"github.com/eventbus-go/bus"
)

// A deploy creates its groups before its publishers start: the group
// keeps what is published before its first member subscribes.
func ExampleBus_CreateGroup() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	if err := b.CreateGroup(ctx, "orders", "billing"); err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "orders", &bus.Message{Payload: []byte("order 1")}); err != nil {
		panic(err)
	}
	got := make(chan string)
	sub, err := b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		got <- string(d.Payload)
		return nil
	}, bus.WithGroup("billing"))
	if err != nil {
		panic(err)
	}
	fmt.Println(<-got)
	_ = sub.Close(ctx)
	// Output: order 1
}

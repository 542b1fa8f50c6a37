package inmemory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/inmemory"
)

// A bounded in-process broker: with BacklogError a Publish that would go
// over the backlog fails at once instead of waiting for consumers.
func ExampleNew() {
	ctx := context.Background()
	be, err := inmemory.New(&inmemory.Options{MaxBacklog: 2, BacklogPolicy: inmemory.BacklogError})
	if err != nil {
		panic(err)
	}
	b := bus.New(be)
	defer b.Close(ctx)

	// A group that exists but does not consume holds the backlog.
	sub, err := b.Subscribe(ctx, "audit", func(context.Context, *bus.Delivery) error { return nil },
		bus.WithGroup("archiver"))
	if err != nil {
		panic(err)
	}
	if err := sub.Close(ctx); err != nil {
		panic(err)
	}

	for i := 1; i <= 3; i++ {
		err := b.Publish(ctx, "audit", &bus.Message{Payload: fmt.Appendf(nil, "event %d", i)})
		fmt.Printf("publish %d: backlog full=%v\n", i, errors.Is(err, inmemory.ErrBacklogFull))
	}
	// Output:
	// publish 1: backlog full=false
	// publish 2: backlog full=false
	// publish 3: backlog full=true
}

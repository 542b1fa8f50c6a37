package bus_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventbus-go/bus"
)

// A batch handler stores messages in bulk: it rejects the one it cannot
// store, and its nil return acks the rest.
func ExampleBus_SubscribeBatch() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	done := make(chan struct{})
	_, err = b.SubscribeBatch(ctx, "clicks", func(ctx context.Context, ds []*bus.Delivery) error {
		var rows []string
		for _, d := range ds {
			if len(d.Payload) == 0 {
				_ = d.Reject(ctx, errors.New("empty click"))
				continue
			}
			rows = append(rows, string(d.Payload))
		}
		fmt.Printf("batch of %d: stored %v\n", len(ds), rows)
		close(done)
		return nil
	}, bus.WithGroup("warehouse"), bus.WithBatch(3, time.Minute))
	if err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "clicks", &bus.Message{Payload: []byte("a")}, &bus.Message{}, &bus.Message{Payload: []byte("c")}); err != nil {
		panic(err)
	}
	<-done
	// Output: batch of 3: stored [a c]
}

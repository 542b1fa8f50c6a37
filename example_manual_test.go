package bus_test

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus"
)

// In AckManual a handler may hand the delivery to other code and settle it
// later, from another goroutine. While the work goes on it calls Extend to
// restart the lease, so the message is not delivered again meanwhile; the
// bus's own keep-alive does this while the handler runs, and stops when
// the handler returns.
func ExampleDelivery_Extend() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	work := make(chan *bus.Delivery, 1)
	_, err = b.Subscribe(ctx, "videos", func(ctx context.Context, d *bus.Delivery) error {
		work <- d // a worker settles it; the slot stays taken until then
		return nil
	}, bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "videos", &bus.Message{ID: "v-1", Payload: []byte("transcode")}); err != nil {
		panic(err)
	}

	d := <-work
	for step := 1; step <= 3; step++ {
		// ... one step of long work ...
		if err := d.Extend(ctx); err != nil {
			fmt.Println("lease lost:", err)
			return
		}
	}
	if err := d.Ack(ctx); err != nil {
		panic(err)
	}
	fmt.Println(d.ID, "done after 3 extensions, attempt", d.Attempt)
	// Output: v-1 done after 3 extensions, attempt 1
}

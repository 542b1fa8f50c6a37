package bus_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/eventbus-go/bus"
)

// A request whose answer the caller waits for: the handler leaves a
// result, the caller reads it by the message ID it published with.
func ExampleDelivery_SetResult() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)
	_, err = b.Subscribe(ctx, "thumbnails.make", func(_ context.Context, d *bus.Delivery) error {
		return d.SetResult([]byte("thumbs/" + strings.TrimSuffix(string(d.Payload), ".jpg") + "-small.jpg"))
	}, bus.WithGroup("thumbnailer"), bus.WithResultTTL(10*time.Minute))
	if err != nil {
		panic(err)
	}

	if err := b.Publish(ctx, "thumbnails.make", &bus.Message{ID: "req-1", Payload: []byte("cat.jpg")}); err != nil {
		panic(err)
	}
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := b.Result(wait, "thumbnails.make", "req-1")
	if err != nil {
		panic(err)
	}
	fmt.Println(string(r))
	// Output: thumbs/cat-small.jpg
}

package protobuf_test

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/contrib/protobuf"
)

// A topic of a generated message type: declare it with the message's
// pointer type and the codec, and name the event type.
var Ticks = bus.NewTopic[*timestamppb.Timestamp]("ticks",
	bus.WithCodec(protobuf.Codec()), bus.WithEventType("google.protobuf.Timestamp"))

func Example() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	got := make(chan string, 1)
	_, err = Ticks.Subscribe(ctx, b, func(ctx context.Context, tick *timestamppb.Timestamp, d *bus.Delivery) error {
		got <- fmt.Sprintf("%s (%s, %s)", tick.AsTime().UTC().Format("2006-01-02"), d.Headers[bus.HeaderContentType], d.Headers[bus.HeaderEventType])
		return nil
	}, bus.WithGroup("clock"))
	if err != nil {
		panic(err)
	}
	if err := Ticks.Publish(ctx, b, &timestamppb.Timestamp{Seconds: 1_795_000_000}); err != nil {
		panic(err)
	}
	fmt.Println(<-got)
	// Output: 2026-11-18 (application/protobuf, google.protobuf.Timestamp)
}

package bus_test

import (
	"context"
	"fmt"

	"github.com/eventbus-go/bus"
)

// OrderPaid is an event type; its topic is declared once, below.
type OrderPaid struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

// OrderPaidTopic is the one place that names the topic, its type and its
// codec (JSON by default).
var OrderPaidTopic = bus.NewTopic[OrderPaid]("orders.paid")

// A typed topic: publishers and consumers agree on the Go type at
// compile time; the handler gets the decoded value.
func ExampleNewTopic() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	got := make(chan string, 1)
	_, err = OrderPaidTopic.Subscribe(ctx, b, func(ctx context.Context, e OrderPaid, d *bus.Delivery) error {
		got <- fmt.Sprintf("%s paid %d cents (key %s, %s)", e.OrderID, e.Cents, d.Key, d.Headers[bus.HeaderContentType])
		return nil
	}, bus.WithGroup("billing"))
	if err != nil {
		panic(err)
	}
	if err := OrderPaidTopic.Publish(ctx, b, OrderPaid{OrderID: "o-42", Cents: 1250}, bus.WithKey("customer-7")); err != nil {
		panic(err)
	}
	fmt.Println(<-got)
	// Output: o-42 paid 1250 cents (key customer-7, application/json)
}

// A message that does not decode never reaches a typed handler: it is
// dead-lettered with code undecodable.
func ExampleTopic_Subscribe_undecodable() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	dead := make(chan *bus.Delivery, 1)
	_, err = b.Subscribe(ctx, "orders.paid.dlq", func(ctx context.Context, d *bus.Delivery) error {
		dead <- d
		return nil
	})
	if err != nil {
		panic(err)
	}
	_, err = OrderPaidTopic.Subscribe(ctx, b, func(ctx context.Context, e OrderPaid, d *bus.Delivery) error {
		panic("never called")
	})
	if err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "orders.paid", &bus.Message{ID: "m-1", Payload: []byte(`{"cents": "twelve"}`)}); err != nil {
		panic(err)
	}
	d := <-dead
	fmt.Println(d.ID, d.Headers[bus.HeaderDeadLetterCode])
	// Output: m-1 undecodable
}

type OrderShipped struct {
	OrderID string `json:"order_id"`
	Carrier string `json:"carrier"`
}

// A Router sends each event type of one topic to its handler.
func ExampleRoute() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	paid := bus.NewTopic[OrderPaid]("orders", bus.WithEventType("order.paid"))
	shipped := bus.NewTopic[OrderShipped]("orders", bus.WithEventType("order.shipped"))
	got := make(chan string, 2)
	r := bus.NewRouter("orders")
	bus.Route(r, paid, func(ctx context.Context, e OrderPaid, d *bus.Delivery) error {
		got <- "paid " + e.OrderID
		return nil
	})
	bus.Route(r, shipped, func(ctx context.Context, e OrderShipped, d *bus.Delivery) error {
		got <- "shipped " + e.OrderID + " by " + e.Carrier
		return nil
	})
	if _, err := r.Subscribe(ctx, b, bus.WithKeyOrdering()); err != nil {
		panic(err)
	}
	if err := paid.Publish(ctx, b, OrderPaid{OrderID: "o-1"}, bus.WithKey("o-1")); err != nil {
		panic(err)
	}
	if err := shipped.Publish(ctx, b, OrderShipped{OrderID: "o-1", Carrier: "dhl"}, bus.WithKey("o-1")); err != nil {
		panic(err)
	}
	fmt.Println(<-got)
	fmt.Println(<-got)
	// Output:
	// paid o-1
	// shipped o-1 by dhl
}

// With CloudEvents, a topic writes the attributes in a binding's binary
// content mode, for consumers outside bus.
func ExampleWithCloudEvents() {
	topic := bus.NewTopic[OrderPaid]("orders.paid",
		bus.WithEventType("com.example.order.paid"),
		bus.WithCloudEvents(bus.CloudEvents{Binding: bus.CloudEventsKafka, Source: "/orders/api"}))
	m, err := topic.Message(OrderPaid{OrderID: "o-1"}, bus.WithID("1234-1234-1234"))
	if err != nil {
		panic(err)
	}
	for _, k := range []string{"ce_specversion", "ce_id", "ce_type", "ce_source", "content-type"} {
		fmt.Printf("%s: %s\n", k, m.Headers[k])
	}
	// Output:
	// ce_specversion: 1.0
	// ce_id: 1234-1234-1234
	// ce_type: com.example.order.paid
	// ce_source: /orders/api
	// content-type: application/json
}

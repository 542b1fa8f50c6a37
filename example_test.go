package bus_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventbus-go/bus"
)

// Publish and subscribe on the in-process backend.
func Example() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	got := make(chan string, 1)
	_, err = b.Subscribe(ctx, "orders.created", func(ctx context.Context, d *bus.Delivery) error {
		got <- fmt.Sprintf("%s attempt=%d key=%s payload=%s", d.Topic, d.Attempt, d.Key, d.Payload)
		return nil // nil acks; an error retries with backoff
	}, bus.WithGroup("billing"))
	if err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "orders.created", &bus.Message{Key: "customer-7", Payload: []byte(`{"id":42}`)}); err != nil {
		panic(err)
	}
	fmt.Println(<-got)
	// Output: orders.created attempt=1 key=customer-7 payload={"id":42}
}

// Open picks the backend from the URL scheme; backends other than mem://
// are linked in with a blank import of their package.
func ExampleOpen() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://?max_backlog=1000")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)
	caps := b.Capabilities()
	fmt.Println(caps.Name, "redelivery:", caps.Redelivery, "start oldest:", caps.StartOldest)

	_, err = bus.Open(ctx, "carrier-pigeon://loft")
	fmt.Println(errors.Is(err, bus.ErrInvalidOption))
	// Output:
	// mem redelivery: true start oldest: true
	// true
}

// In AckManual the handler settles each delivery itself: here it asks for
// a redelivery once, then acks the second attempt.
func ExampleDelivery_Nack() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	done := make(chan struct{})
	_, err = b.Subscribe(ctx, "jobs", func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt == 1 {
			fmt.Println("attempt 1: nack, retry in 10ms")
			return d.Nack(ctx, 10*time.Millisecond)
		}
		fmt.Printf("attempt %d: ack %s\n", d.Attempt, d.Payload)
		defer close(done)
		return d.Ack(ctx)
	}, bus.WithAckMode(bus.AckManual))
	if err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "jobs", &bus.Message{Payload: []byte("resize image 7")}); err != nil {
		panic(err)
	}
	<-done
	// Output:
	// attempt 1: nack, retry in 10ms
	// attempt 2: ack resize image 7
}

// A handler error marked with Reject is not retried: the message moves to
// the dead-letter topic ("<topic>.dlq" by default) with headers that say
// why and where it came from.
func Example_deadLetter() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	dead := make(chan *bus.Delivery, 1)
	_, err = b.Subscribe(ctx, "payments.dlq", func(ctx context.Context, d *bus.Delivery) error {
		dead <- d
		return nil
	}, bus.WithGroup("ops"))
	if err != nil {
		panic(err)
	}
	_, err = b.Subscribe(ctx, "payments", func(ctx context.Context, d *bus.Delivery) error {
		return bus.Reject(errors.New("card number is malformed"))
	}, bus.WithGroup("charger"))
	if err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "payments", &bus.Message{ID: "pay-1", Payload: []byte("4111-x")}); err != nil {
		panic(err)
	}
	d := <-dead
	fmt.Println("payload:", string(d.Payload))
	fmt.Println("from:", d.Headers[bus.HeaderDeadLetterTopic], "group:", d.Headers[bus.HeaderDeadLetterGroup], "attempt:", d.Headers[bus.HeaderDeadLetterAttempt])
	fmt.Println("id:", d.Headers[bus.HeaderDeadLetterID])
	fmt.Println("reason:", d.Headers[bus.HeaderDeadLetterReason])
	// Output:
	// payload: 4111-x
	// from: payments group: charger attempt: 1
	// id: pay-1
	// reason: card number is malformed
}

// PublishAsync returns at once with a result the backend confirms later;
// Flush waits for every earlier result. A key's messages are stored in
// call order; bad input fails before any I/O.
func ExampleBus_PublishAsync() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	got := make(chan string, 3)
	_, err = b.Subscribe(ctx, "orders.created", func(ctx context.Context, d *bus.Delivery) error {
		got <- string(d.Payload)
		return nil
	}, bus.WithGroup("billing"), bus.WithKeyOrdering())
	if err != nil {
		panic(err)
	}
	var results []*bus.PublishResult
	for i := 1; i <= 3; i++ {
		m := &bus.Message{Key: "customer-7", Payload: fmt.Appendf(nil, "order %d", i)}
		results = append(results, b.PublishAsync(ctx, "orders.created", m))
	}
	bad := b.PublishAsync(ctx, "orders.created", &bus.Message{Headers: map[string]string{"bad key": "x"}})
	fmt.Println("invalid:", errors.Is(bad.Get(ctx), bus.ErrInvalidMessage))

	if err := b.Flush(ctx); err != nil {
		panic(err)
	}
	for _, r := range results {
		if err := r.Get(ctx); err != nil {
			panic(err)
		}
	}
	for range 3 {
		fmt.Println(<-got)
	}
	// Output:
	// invalid: true
	// order 1
	// order 2
	// order 3
}

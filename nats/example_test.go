package nats_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/eventbus-go/bus"
	busnats "github.com/eventbus-go/bus/nats"
)

// Connect to a JetStream server and use it through the bus. The example
// starts a private embedded server so that it runs anywhere; an
// application passes its own URL, for example "nats://nats.internal:4222".
func ExampleConnect() {
	dir, err := os.MkdirTemp("", "bus-example-nats-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(10 * time.Second) {
		panic("nats-server did not start")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	be, err := busnats.Connect(ctx, srv.ClientURL(), &busnats.Options{SubjectPrefix: "example"})
	if err != nil {
		panic(err)
	}
	b := bus.New(be)
	defer b.Close(ctx)

	got := make(chan string, 1)
	_, err = b.Subscribe(ctx, "orders.created", func(ctx context.Context, d *bus.Delivery) error {
		got <- fmt.Sprintf("%s %s attempt=%d", d.ID, d.Payload, d.Attempt)
		return nil
	}, bus.WithGroup("billing"))
	if err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "orders.created", &bus.Message{ID: "order-42", Payload: []byte("paid")}); err != nil {
		panic(err)
	}
	fmt.Println(<-got, "persistent:", b.Capabilities().Persistent)
	// Output: order-42 paid attempt=1 persistent: true
}

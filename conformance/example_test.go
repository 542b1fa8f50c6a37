package conformance_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
)

// countingBackend is a custom backend: here a thin layer over inmemory that
// counts published messages, standing for any backend a platform team
// writes. Embedding keeps the inner backend's subscriptions, with their
// optional interfaces (Extender, DeadLetterer).
type countingBackend struct {
	backend.Backend
	published atomic.Int64
}

func (c *countingBackend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	c.published.Add(int64(len(msgs)))
	return c.Backend.Publish(ctx, topic, msgs)
}

// A custom backend gets every portable feature from bus.New and proves
// itself by running the suite from its own test file, with a constructor
// that returns a fresh, isolated backend per case:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t testing.TB) backend.Backend {
//			be, err := inmemory.New(nil)
//			require.NoError(t, err)
//			return &countingBackend{Backend: be}
//		})
//	}
//
// The suite picks its cases from Capabilities and the optional interfaces
// the subscriptions implement, and names the guarantee a backend breaks.
func Example_customBackend() {
	ctx := context.Background()
	inner, err := inmemory.New(nil)
	if err != nil {
		panic(err)
	}
	be := &countingBackend{Backend: inner}
	b := bus.New(be)
	defer b.Close(ctx)

	got := make(chan string, 1)
	if _, err := b.Subscribe(ctx, "ping", func(ctx context.Context, d *bus.Delivery) error {
		got <- string(d.Payload)
		return nil
	}); err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "ping", &bus.Message{Payload: []byte("pong")}); err != nil {
		panic(err)
	}
	fmt.Println(<-got, "published:", be.published.Load())
	// Output: pong published: 1
}

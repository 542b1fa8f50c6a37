package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/middleware"
)

// A handler stack: the correlation ID of the consumed message goes into the
// ctx, duplicates are skipped, and a failing call is retried in process
// with a fresh deadline per call.
func Example() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	done := make(chan struct{})
	calls := 0
	handler := func(ctx context.Context, d *bus.Delivery) error {
		calls++
		if calls == 1 {
			fmt.Println("call 1: dependency unavailable")
			return errors.New("unavailable")
		}
		id, _ := middleware.CorrelationIDFrom(ctx)
		fmt.Printf("call %d: handled %s (correlation %s)\n", calls, d.Payload, id)
		close(done)
		return nil
	}
	_, err = b.Subscribe(ctx, "orders", handler, bus.WithMiddleware(
		middleware.CorrelationID(),
		middleware.Dedup(middleware.NewMemoryStore(0)),
		middleware.Retry(3, func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }),
		middleware.Timeout(time.Second),
	))
	if err != nil {
		panic(err)
	}
	err = b.Publish(ctx, "orders", &bus.Message{
		ID:      "order-1",
		Headers: map[string]string{middleware.HeaderCorrelationID: "req-42"},
		Payload: []byte("order 1"),
	})
	if err != nil {
		panic(err)
	}
	<-done
	// Output:
	// call 1: dependency unavailable
	// call 2: handled order 1 (correlation req-42)
}

// A message delivered twice with the same ID (here published twice with
// the publish window off; in production a redelivery, or a producer that
// does not deduplicate) is handled once; the copy is acked without
// running the handler.
func ExampleDedup() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://?dedup_window=0")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	settled := make(chan bus.Outcome, 2)
	onSettle := func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			d.OnSettle(func(o bus.Outcome, _ error) { settled <- o })
			return next(ctx, d)
		}
	}
	handler := func(ctx context.Context, d *bus.Delivery) error {
		fmt.Println("handling", d.ID)
		return nil
	}
	_, err = b.Subscribe(ctx, "payments", handler,
		bus.WithMiddleware(onSettle, middleware.Dedup(middleware.NewMemoryStore(0))))
	if err != nil {
		panic(err)
	}
	for range 2 {
		if err := b.Publish(ctx, "payments", &bus.Message{ID: "pay-7"}); err != nil {
			panic(err)
		}
		select {
		case o := <-settled:
			fmt.Println("settled:", o)
		case <-time.After(10 * time.Second):
			panic("the delivery was not settled")
		}
	}
	// Output:
	// handling pay-7
	// settled: ack
	// settled: ack
}

// Logging never logs payloads, and logs header values only when revealed.
func ExampleLogging() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" {
				return slog.Attr{} // keep the example's output stable
			}
			return a
		},
	}))
	h := middleware.Logging(logger, middleware.LogHeaders("content-type"))(
		func(ctx context.Context, d *bus.Delivery) error { return errors.New("card declined") })
	_ = h(context.Background(), &bus.Delivery{
		Message: bus.Message{ID: "pay-7", Payload: []byte(`{"card":"4111..."}`),
			Headers: map[string]string{"authorization": "Bearer s3cret", "content-type": "application/json"}},
		Topic: "payments", Group: "billing", Attempt: 1,
	})
	// Output:
	// level=WARN msg="bus: handler failed" topic=payments group=billing message_id=pay-7 attempt=1 payload_bytes=18 error="card declined" headers.authorization=[REDACTED] headers.content-type=application/json
}

package otelbus_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/middleware/otelbus"
)

// A message published inside a request's span is handled in a consumer
// span of the same trace, whose parent is the producer span.
func Example() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(ctx)

	ins, err := otelbus.New(
		otelbus.WithTracerProvider(tp),
		otelbus.WithPropagator(propagation.TraceContext{}),
		otelbus.WithSystem("inmemory"),
	)
	if err != nil {
		panic(err)
	}
	b, err := bus.Open(ctx, "mem://", ins.Options()...)
	if err != nil {
		panic(err)
	}

	handled := make(chan trace.SpanContext, 1)
	_, err = b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		handled <- trace.SpanContextFromContext(ctx)
		return nil
	})
	if err != nil {
		panic(err)
	}

	reqCtx, req := tp.Tracer("http").Start(ctx, "POST /orders")
	if err := b.Publish(reqCtx, "orders", &bus.Message{Payload: []byte("order 1")}); err != nil {
		panic(err)
	}
	req.End()
	consumer := <-handled
	if err := b.Close(ctx); err != nil { // settles and ends every span
		panic(err)
	}

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans.Ended() {
		byName[s.Name()] = s
	}
	producer := byName["send orders"]
	process := byName["process orders"]
	fmt.Println("producer span:", producer.Name(), producer.SpanKind())
	fmt.Println("consumer span:", process.Name(), process.SpanKind())
	fmt.Println("same trace as the request:", consumer.TraceID() == req.SpanContext().TraceID())
	fmt.Println("parent is the producer span:", process.Parent().SpanID() == producer.SpanContext().SpanID())
	for _, kv := range process.Attributes() {
		switch kv.Key {
		case "messaging.system", "messaging.destination.name", "messaging.consumer.group.name", "bus.delivery.outcome":
			fmt.Printf("%s=%s\n", kv.Key, kv.Value.AsString())
		}
	}
	// Output:
	// producer span: send orders producer
	// consumer span: process orders consumer
	// same trace as the request: true
	// parent is the producer span: true
	// messaging.system=inmemory
	// messaging.destination.name=orders
	// messaging.consumer.group.name=default
	// bus.delivery.outcome=ack
}

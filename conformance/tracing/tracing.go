// Package tracing is the opt-in part of the conformance suite that checks
// OpenTelemetry trace propagation through a backend. It is separate from
// package conformance so that the core suite does not import the
// OpenTelemetry SDK; every first-party backend runs both:
//
//	func TestConformanceTracing(t *testing.T) { tracing.Run(t, newBackend) }
package tracing

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/msgid"
	"github.com/eventbus-go/bus/middleware/otelbus"
)

// Run checks that trace context flows from publisher to consumer
// through the backend: a message published inside a parent span is handled
// in a consumer span of the same trace whose parent is the producer span,
// for a single publish, for every message of a batch, and (for backends
// that redeliver) again after a nack. It uses the middleware/otelbus
// instrumentation with the W3C trace context propagator and records spans
// with the OpenTelemetry SDK.
func Run(t *testing.T, newBackend conformance.NewBackend) {
	t.Helper()
	t.Run("ConsumerSpanIsChildOfProducerSpan", func(t *testing.T) { testTraceSingle(t, newBackend) })
	t.Run("BatchMessagesCarryTheirOwnContext", func(t *testing.T) { testTraceBatch(t, newBackend) })
	t.Run("RedeliveryKeepsTraceContext", func(t *testing.T) { testTraceRedelivery(t, newBackend) })
}

const (
	traceDeadline = 10 * time.Second
	closeTimeout  = 10 * time.Second
	pollInterval  = 5 * time.Millisecond
)

// trySend sends v unless ch is full.
func trySend[T any](ch chan<- T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// traceEnv is a bus over a fresh backend, instrumented with a recording
// tracer provider.
type traceEnv struct {
	bus   *bus.Bus
	tp    *sdktrace.TracerProvider
	spans *tracetest.SpanRecorder
	topic string
	group string
}

func newTraceEnv(t *testing.T, newBackend conformance.NewBackend) *traceEnv {
	t.Helper()
	e := &traceEnv{spans: tracetest.NewSpanRecorder()}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	be := newBackend(t)
	ins, err := otelbus.New(otelbus.WithTracerProvider(e.tp), otelbus.WithPropagator(propagation.TraceContext{}),
		otelbus.WithSystem(be.Capabilities().Name))
	if err != nil {
		t.Fatalf("otelbus.New: %v", err)
	}
	e.bus = bus.New(be, ins.Options()...)
	id := msgid.New()
	e.topic, e.group = "conformance.tracing."+id, "g-"+id
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		if err := e.bus.Close(ctx); err != nil {
			t.Errorf("close bus: %v", err)
		}
		_ = e.tp.Shutdown(ctx)
	})
	return e
}

// subscribe runs h on the env's topic; handled receives the span context
// each handler call ran in, keyed by message ID.
func (e *traceEnv) subscribe(t *testing.T, h bus.Handler, opts ...bus.SubscribeOption) <-chan handled {
	t.Helper()
	ch := make(chan handled, 64)
	wrapped := func(ctx context.Context, d *bus.Delivery) error {
		trySend(ch, handled{id: d.ID, attempt: d.Attempt, sc: trace.SpanContextFromContext(ctx)})
		return h(ctx, d)
	}
	opts = append([]bus.SubscribeOption{bus.WithGroup(e.group), bus.WithAckTimeout(20 * time.Second)}, opts...)
	if _, err := e.bus.Subscribe(context.Background(), e.topic, wrapped, opts...); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	return ch
}

type handled struct {
	id      string
	attempt int
	sc      trace.SpanContext
}

func waitHandled(t *testing.T, ch <-chan handled, n int) []handled {
	t.Helper()
	var got []handled
	timeout := time.After(traceDeadline)
	for len(got) < n {
		select {
		case h := <-ch:
			got = append(got, h)
		case <-timeout:
			t.Fatalf("handled %d of %d messages within %v", len(got), n, traceDeadline)
		}
	}
	return got
}

// ended waits until n spans called name have ended and returns them; more
// than n is an error.
func (e *traceEnv) ended(t *testing.T, n int, name string) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(traceDeadline)
	for {
		var got []sdktrace.ReadOnlySpan
		for _, s := range e.spans.Ended() {
			if s.Name() == name {
				got = append(got, s)
			}
		}
		if len(got) >= n {
			if len(got) > n {
				t.Fatalf("%d %q spans ended, want %d", len(got), name, n)
			}
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d %q spans ended within %v", len(got), n, name, traceDeadline)
		}
		time.Sleep(pollInterval)
	}
}

func spanAttr(s sdktrace.ReadOnlySpan, k string) string {
	for _, kv := range s.Attributes() {
		if kv.Key == attribute.Key(k) {
			return kv.Value.String()
		}
	}
	return ""
}

// checkChild fails unless consumer is in parent's trace with producer as
// its parent span.
func checkChild(t *testing.T, parent trace.SpanContext, producer, consumer sdktrace.ReadOnlySpan) {
	t.Helper()
	if got, want := consumer.SpanContext().TraceID(), parent.TraceID(); got != want {
		t.Errorf("consumer span trace ID = %s, want the publisher's %s", got, want)
	}
	if got, want := consumer.Parent().SpanID(), producer.SpanContext().SpanID(); got != want {
		t.Errorf("consumer span parent = %s, want the producer span %s", got, want)
	}
	if consumer.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("consumer span kind = %v, want consumer", consumer.SpanKind())
	}
}

func testTraceSingle(t *testing.T, newBackend conformance.NewBackend) {
	e := newTraceEnv(t, newBackend)
	ch := e.subscribe(t, func(context.Context, *bus.Delivery) error { return nil })

	ctx, parent := e.tp.Tracer("conformance").Start(context.Background(), "request")
	if err := e.bus.Publish(ctx, e.topic, &bus.Message{Payload: []byte("traced")}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	parent.End()
	h := waitHandled(t, ch, 1)[0]

	producer := e.ended(t, 1, "send "+e.topic)[0]
	consumer := e.ended(t, 1, "process "+e.topic)[0]
	if producer.SpanKind() != trace.SpanKindProducer {
		t.Errorf("producer span kind = %v, want producer", producer.SpanKind())
	}
	if producer.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("producer span parent = %s, want the request span %s", producer.Parent().SpanID(), parent.SpanContext().SpanID())
	}
	checkChild(t, parent.SpanContext(), producer, consumer)
	if h.sc.SpanID() != consumer.SpanContext().SpanID() {
		t.Errorf("handler ctx span = %s, want the consumer span %s", h.sc.SpanID(), consumer.SpanContext().SpanID())
	}
	for k, want := range map[string]string{
		"messaging.destination.name":    e.topic,
		"messaging.consumer.group.name": e.group,
		"messaging.message.id":          h.id,
		"bus.delivery.outcome":          "ack",
	} {
		if got := spanAttr(consumer, k); got != want {
			t.Errorf("consumer span %s = %q, want %q", k, got, want)
		}
	}
}

func testTraceBatch(t *testing.T, newBackend conformance.NewBackend) {
	e := newTraceEnv(t, newBackend)
	ch := e.subscribe(t, func(context.Context, *bus.Delivery) error { return nil })

	const n = 4
	ctx, parent := e.tp.Tracer("conformance").Start(context.Background(), "request")
	msgs := make([]*bus.Message, n)
	for i := range msgs {
		msgs[i] = &bus.Message{Payload: []byte(fmt.Sprint(i))}
	}
	if err := e.bus.Publish(ctx, e.topic, msgs...); err != nil {
		t.Fatalf("publish batch: %v", err)
	}
	parent.End()
	waitHandled(t, ch, n)

	creates := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range e.ended(t, n, "create "+e.topic) {
		creates[spanAttr(s, "messaging.message.id")] = s
	}
	if len(creates) != n {
		t.Fatalf("create spans for %d distinct messages, want %d", len(creates), n)
	}
	for _, c := range e.ended(t, n, "process "+e.topic) {
		id := spanAttr(c, "messaging.message.id")
		p, ok := creates[id]
		if !ok {
			t.Errorf("consumer span for unknown message %q", id)
			continue
		}
		checkChild(t, parent.SpanContext(), p, c)
	}
}

func testTraceRedelivery(t *testing.T, newBackend conformance.NewBackend) {
	e := newTraceEnv(t, newBackend)
	if !e.bus.Capabilities().Redelivery {
		t.Skipf("%s does not redeliver", e.bus.Capabilities().Name)
	}
	var once sync.Once
	ch := e.subscribe(t, func(ctx context.Context, d *bus.Delivery) error {
		var err error
		once.Do(func() { err = fmt.Errorf("first attempt fails") })
		return err
	}, bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(10 * time.Millisecond) }))

	ctx, parent := e.tp.Tracer("conformance").Start(context.Background(), "request")
	if err := e.bus.Publish(ctx, e.topic, &bus.Message{}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	parent.End()
	got := waitHandled(t, ch, 2)
	if got[1].attempt != 2 {
		t.Errorf("second handling has attempt %d, want 2", got[1].attempt)
	}

	producer := e.ended(t, 1, "send "+e.topic)[0]
	consumers := e.ended(t, 2, "process "+e.topic)
	outcomes := map[string]bool{}
	for _, c := range consumers {
		checkChild(t, parent.SpanContext(), producer, c)
		outcomes[spanAttr(c, "bus.delivery.attempt")+":"+spanAttr(c, "bus.delivery.outcome")] = true
	}
	for _, want := range []string{"1:nack", "2:ack"} {
		if !outcomes[want] {
			t.Errorf("no consumer span with attempt:outcome %s (got %v)", want, outcomes)
		}
	}
}

package otelbus

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/middleware"
)

func TestConsumerSpanIsChildOfProducerSpanInPublishersTrace(t *testing.T) {
	e := newEnv(t)
	handled := make(chan trace.SpanContext, 1)
	e.subscribe(t, "orders", func(ctx context.Context, d *bus.Delivery) error {
		handled <- trace.SpanContextFromContext(ctx)
		return nil
	}, bus.WithGroup("billing"))

	ctx, parent := e.tp.Tracer("test").Start(context.Background(), "http request")
	msg := &bus.Message{ID: "m-1", Payload: []byte("hello")}
	require.NoError(t, e.bus.Publish(ctx, "orders", msg))
	parent.End()
	assert.Empty(t, msg.Headers, "the caller's message is not modified")

	var hctx trace.SpanContext
	select {
	case hctx = <-handled:
	case <-time.After(5 * time.Second):
		t.Fatal("message not handled")
	}
	e.waitSettled(t, 1)
	producer := e.endedSpans(t, "send orders", 1)[0]
	consumer := e.endedSpans(t, "process orders", 1)[0]

	assert.Equal(t, trace.SpanKindProducer, producer.SpanKind(), "publish span kind")
	assert.Equal(t, parent.SpanContext().SpanID(), producer.Parent().SpanID(), "producer span is a child of the request")
	assert.Equal(t, trace.SpanKindConsumer, consumer.SpanKind(), "process span kind")
	assert.Equal(t, parent.SpanContext().TraceID(), consumer.SpanContext().TraceID(), "consumer span in the publisher's trace")
	assert.Equal(t, producer.SpanContext().SpanID(), consumer.Parent().SpanID(), "consumer span's parent is the producer span")
	assert.True(t, consumer.Parent().IsRemote(), "the parent came through the message")
	assert.Equal(t, consumer.SpanContext().SpanID(), hctx.SpanID(), "the handler runs inside the consumer span")

	for _, tt := range []struct {
		key  string
		want any
	}{
		{"messaging.system", "inmemory"},
		{"messaging.destination.name", "orders"},
		{"messaging.consumer.group.name", "billing"},
		{"messaging.message.id", "m-1"},
		{"messaging.operation.type", "process"},
		{"messaging.message.body.size", int64(5)},
		{"bus.delivery.attempt", int64(1)},
		{"bus.delivery.outcome", "ack"},
	} {
		assert.Equal(t, tt.want, attr(consumer, attribute.Key(tt.key)).AsInterface(), "consumer attribute %s", tt.key)
	}
	assert.Equal(t, "send", attr(producer, semconv.MessagingOperationTypeKey).AsString(), "producer operation type")
	assert.Equal(t, "m-1", attr(producer, semconv.MessagingMessageIDKey).AsString(), "producer message id")
	assert.Equal(t, codes.Unset, consumer.Status().Code, "a successful handler leaves the status unset")
}

func TestBatchPublishGivesEachMessageItsOwnContext(t *testing.T) {
	e := newEnv(t)
	e.subscribe(t, "orders", func(ctx context.Context, d *bus.Delivery) error { return nil })
	ctx, parent := e.tp.Tracer("test").Start(context.Background(), "request")
	msgs := []*bus.Message{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	require.NoError(t, e.bus.Publish(ctx, "orders", msgs...))
	parent.End()
	e.waitSettled(t, 3)

	creates := e.endedSpans(t, "create orders", 3)
	send := e.endedSpans(t, "send orders", 1)[0]
	consumers := e.endedSpans(t, "process orders", 3)

	createOf := map[string]trace.SpanContext{}
	for _, c := range creates {
		assert.Equal(t, parent.SpanContext().SpanID(), c.Parent().SpanID(), "create spans are children of the request")
		createOf[attr(c, semconv.MessagingMessageIDKey).AsString()] = c.SpanContext()
	}
	require.Len(t, createOf, 3, "one create span per message")
	assert.Equal(t, trace.SpanKindClient, send.SpanKind(), "batch send span kind")
	assert.Len(t, send.Links(), 3, "the send span links every create span")
	assert.Equal(t, int64(3), attr(send, semconv.MessagingBatchMessageCountKey).AsInt64())
	for _, c := range consumers {
		id := attr(c, semconv.MessagingMessageIDKey).AsString()
		assert.Equal(t, createOf[id].SpanID(), c.Parent().SpanID(), "message %s is processed under its own create span", id)
		assert.Equal(t, parent.SpanContext().TraceID(), c.SpanContext().TraceID())
	}
}

func TestConsumerSpanRecordsHandlerErrorAndDeadLetterOutcome(t *testing.T) {
	e := newEnv(t)
	e.subscribe(t, "orders", func(ctx context.Context, d *bus.Delivery) error {
		return bus.Reject(errString("bad order"))
	})
	require.NoError(t, e.bus.Publish(context.Background(), "orders", &bus.Message{}))
	e.waitSettled(t, 1)
	consumer := e.endedSpans(t, "process orders", 1)[0]
	assert.Equal(t, codes.Error, consumer.Status().Code, "handler error sets the status")
	assert.Contains(t, consumer.Status().Description, "bad order")
	assert.Equal(t, "dead_letter", attr(consumer, OutcomeKey).AsString(), "outcome recorded at settlement")
}

func TestManualSettlementEndsConsumerSpan(t *testing.T) {
	e := newEnv(t)
	deliveries := make(chan *bus.Delivery, 1)
	e.subscribe(t, "orders", func(ctx context.Context, d *bus.Delivery) error {
		deliveries <- d
		return nil
	}, bus.WithAckMode(bus.AckManual))
	require.NoError(t, e.bus.Publish(context.Background(), "orders", &bus.Message{}))
	var d *bus.Delivery
	select {
	case d = <-deliveries:
	case <-time.After(5 * time.Second):
		t.Fatal("not delivered")
	}
	// The handler has returned (or is about to); the span must stay open
	// until the delivery is settled.
	require.Eventually(t, func() bool { return len(e.spans.Started()) >= 2 }, 5*time.Second, 5*time.Millisecond)
	for _, s := range e.spans.Ended() {
		assert.NotEqual(t, "process orders", s.Name(), "consumer span ended before settlement")
	}
	require.NoError(t, d.Nack(context.Background(), time.Hour), "settle from another goroutine")
	consumer := e.endedSpans(t, "process orders", 1)[0]
	assert.Equal(t, "nack", attr(consumer, OutcomeKey).AsString())
}

func TestPanickingHandlerEndsSpanWithError(t *testing.T) {
	e := newEnv(t)
	e.subscribe(t, "orders", func(ctx context.Context, d *bus.Delivery) error { panic("kaboom") },
		bus.WithMaxDeliveries(1))
	require.NoError(t, e.bus.Publish(context.Background(), "orders", &bus.Message{}))
	e.waitSettled(t, 1)
	consumer := e.endedSpans(t, "process orders", 1)[0]
	assert.Equal(t, codes.Error, consumer.Status().Code, "panic marks the span")
	require.Eventually(t, func() bool {
		m := e.metrics(t)
		return sum(m, "bus.messages.failed") == 1 && sum(m, "bus.messages.in_flight") == 0 && sum(m, "bus.messages.dead_lettered") == 1
	}, 5*time.Second, 5*time.Millisecond, "panic counted as a failure, in-flight back to 0")
}

func TestNoopProvidersLeaveMessagesUntouched(t *testing.T) {
	ins, err := New(WithTracerProvider(tracenoop.NewTracerProvider()), WithMeterProvider(noop.NewMeterProvider()),
		WithPropagator(propagation.TraceContext{}))
	require.NoError(t, err)
	m := &bus.Message{ID: "m-1"}
	pub := ins.PublishMiddleware()(middleware.PublishFunc(func(ctx context.Context, topic string, msgs ...*bus.Message) error {
		assert.Same(t, m, msgs[0], "nothing to inject: the message is passed as is")
		return nil
	}))
	require.NoError(t, pub.Publish(context.Background(), "orders", []*bus.Message{m}...))
	assert.Nil(t, m.Headers, "no header added")
}

func TestExtractFindsTraceparentWhateverItsCase(t *testing.T) {
	tp := propagation.TraceContext{}
	const tpHeader = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := tp.Extract(context.Background(), headerCarrier{"Traceparent": tpHeader})
	sc := trace.SpanContextFromContext(ctx)
	assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", sc.TraceID().String(), "case-changed key still read")
}

type errString string

func (e errString) Error() string { return string(e) }

// Package otelbus adds OpenTelemetry tracing and metrics to a bus, following
// the OpenTelemetry semantic conventions for messaging.
//
//	ins, err := otelbus.New(otelbus.WithSystem("redis"))
//	...
//	b, err := bus.Open(ctx, url, ins.Options()...)
//
// # Tracing
//
// Publish starts a producer span per message and injects its W3C trace
// context into the message headers ("traceparent", "tracestate" and, with a
// baggage propagator, "baggage") through the configured propagator. A
// single message gets one "send <topic>" span. A batch gets one
// "create <topic>" span per message, so each message carries its own
// context, plus a "send <topic>" client span linked to all of them.
//
// The consumer side extracts the context from the headers and starts a
// "process <topic>" consumer span as its child, with the attributes
// messaging.system, messaging.destination.name,
// messaging.consumer.group.name, messaging.message.id,
// messaging.message.body.size, messaging.operation.type/name,
// bus.delivery.attempt and, once the delivery is settled,
// bus.delivery.outcome ("ack", "nack", "dead_letter", "dropped",
// "lease_lost"). The span ends when both the handler has returned and the
// delivery is settled, so it covers a manual settlement made later. A
// handler error sets the span status to Error.
//
// Attributes are given when the span starts, so samplers see them.
//
// # Metrics
//
// All counters have the attributes messaging.system and
// messaging.destination.name; those of the consumer side also
// messaging.consumer.group.name.
//
//	bus.messages.published      counter   messages accepted by Publish
//	bus.messages.publish_failed counter   messages Publish did not accept
//	bus.messages.delivered      counter   handler calls (deliveries)
//	bus.messages.failed         counter   handler calls that returned an error
//	bus.messages.acked          counter   deliveries settled by ack
//	bus.messages.nacked         counter   deliveries handed back for redelivery
//	bus.messages.dead_lettered  counter   deliveries moved to the dead-letter topic
//	bus.messages.dropped        counter   deliveries rejected with dead-lettering off
//	bus.messages.lease_lost     counter   deliveries whose lease ran out unsettled
//	bus.messages.in_flight      up-down   deliveries being handled or not yet settled
//	bus.handler.duration        histogram seconds per handler call
//	bus.e2e.latency             histogram seconds from publish to handler start
//
// Deliveries the bus settles without calling the handler (a message
// redelivered past bus.WithMaxDeliveries after its leases ran out is
// dead-lettered directly) pass no middleware and are not counted here; the
// bus reports them to its observer (see Observer, which counts them).
//
// End-to-end latency is measured from Delivery.PublishedAt, which every
// backend fills with the time the bus accepted the message; it includes
// clock skew between producer and consumer hosts.
//
// # Providers
//
// The tracer provider, meter provider and propagator come from options and
// default to the global ones (otel.GetTracerProvider,
// otel.GetMeterProvider, otel.GetTextMapPropagator), read when New is
// called; the global ones forward to whatever is installed later.
//
// # Cost
//
// With the explicit no-op providers of the OpenTelemetry API
// (go.opentelemetry.io/otel/trace/noop and metric/noop) for both traces
// and metrics, Middleware and PublishMiddleware return the handler and the
// publish function unchanged. The global providers while no SDK is
// installed are recognised too, per message, so installing an SDK later
// takes effect at once: until then no span is started, no context is
// injected or extracted, and no measurement is made.
package otelbus

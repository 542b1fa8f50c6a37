package otelbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/eventbus-go/bus"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/eventbus-go/bus/middleware/otelbus"

// Attribute keys this package adds to the messaging conventions.
const (
	// AttemptKey is the delivery attempt (1 on the first delivery).
	AttemptKey = attribute.Key("bus.delivery.attempt")
	// OutcomeKey is how the delivery was settled (bus.Outcome.String()).
	OutcomeKey = attribute.Key("bus.delivery.outcome")
	// DeadLetterCodeKey labels bus.messages.dead_lettered and
	// bus.messages.dropped with the reason code (max_deliveries,
	// rejected, malformed, oversized, lease_lost, expired, trimmed,
	// undecodable, unknown_type, held).
	DeadLetterCodeKey = attribute.Key("bus.dlq.code")
)

// Instrumentation traces and measures a bus. Install it with Options, or
// with Middleware and PublishMiddleware separately. It is safe for
// concurrent use and may serve several buses.
type Instrumentation struct {
	// tracing and metrics are false when the providers are the explicit
	// no-op ones of the OpenTelemetry API: that work is skipped.
	tracing, metrics bool
	// unsetTP and unsetMP are the global providers as New found them
	// while no SDK was installed. As long as otel.GetTracerProvider (or
	// GetMeterProvider) still returns them, spans would be non-recording
	// and measurements discarded, so that work is skipped; once an SDK is
	// installed the tracer and instruments forward to it.
	unsetTP trace.TracerProvider
	unsetMP metric.MeterProvider

	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	system attribute.KeyValue

	published, publishFailed                        metric.Int64Counter
	delivered, failed                               metric.Int64Counter
	acked, nacked, deadLettered, dropped, leaseLost metric.Int64Counter
	inFlight                                        metric.Int64UpDownCounter
	handlerDuration, e2eLatency                     metric.Float64Histogram
	settleCounters                                  []metric.Int64Counter

	mu    sync.RWMutex
	attrs map[attrKey]*attrs
}

type attrKey struct{ topic, group string }

// attrs holds everything derived from a topic and group, built once.
type attrs struct {
	topic, group string
	spanName     string                // "process <topic>" or "send <topic>"
	createName   string                // "create <topic>" (publish side)
	span         []attribute.KeyValue  // process span, or send span of one message
	create       []attribute.KeyValue  // create span of a batch message
	batchSend    []attribute.KeyValue  // send span of a batch
	add          []metric.AddOption    // one element, shared: no allocation per call
	rec          []metric.RecordOption // one element, shared
	metric       []attribute.KeyValue  // the attributes of add and rec
}

// Span kinds as start options, boxed once.
var (
	consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)
	producerKind = trace.WithSpanKind(trace.SpanKindProducer)
	clientKind   = trace.WithSpanKind(trace.SpanKindClient)
)

// noSpan stands in for a span when tracing is off.
var noSpan trace.Span = tracenoop.Span{}

// latencyBuckets suit message latencies from sub-millisecond to a minute.
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// New returns an Instrumentation with its instruments created.
func New(opts ...Option) (*Instrumentation, error) {
	c := config{system: DefaultSystem}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	// The API's delegating providers, before otel.SetTracerProvider and
	// otel.SetMeterProvider, are recognised by type name; should that name
	// change, only this shortcut is lost.
	var unsetTP trace.TracerProvider
	var unsetMP metric.MeterProvider
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
		if fmt.Sprintf("%T", c.tp) == "*global.tracerProvider" {
			unsetTP = c.tp
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
		if fmt.Sprintf("%T", c.mp) == "*global.meterProvider" {
			unsetMP = c.mp
		}
	}
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
	}
	_, noTP := c.tp.(tracenoop.TracerProvider)
	_, noMP := c.mp.(metricnoop.MeterProvider)
	in := &Instrumentation{
		tracing: !noTP,
		metrics: !noMP,
		unsetTP: unsetTP,
		unsetMP: unsetMP,
		tracer:  c.tp.Tracer(ScopeName),
		prop:    c.prop,
		system:  semconv.MessagingSystemKey.String(c.system),
		attrs:   map[attrKey]*attrs{},
	}
	if err := in.instruments(c.mp.Meter(ScopeName)); err != nil {
		return nil, err
	}
	return in, nil
}

// instruments creates the metric instruments of in on m.
func (in *Instrumentation) instruments(m metric.Meter) error {
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		ctr, err := m.Int64Counter(name, metric.WithUnit("{message}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return ctr
	}
	in.published = counter("bus.messages.published", "Messages accepted by Publish.")
	in.publishFailed = counter("bus.messages.publish_failed", "Messages Publish did not accept.")
	in.delivered = counter("bus.messages.delivered", "Handler calls.")
	in.failed = counter("bus.messages.failed", "Handler calls that returned an error.")
	in.acked = counter("bus.messages.acked", "Deliveries settled by ack.")
	in.nacked = counter("bus.messages.nacked", "Deliveries handed back for redelivery.")
	in.deadLettered = counter("bus.messages.dead_lettered", "Deliveries moved to the dead-letter topic.")
	in.dropped = counter("bus.messages.dropped", "Deliveries rejected while dead-lettering is off.")
	in.leaseLost = counter("bus.messages.lease_lost", "Deliveries whose lease ran out unsettled.")
	in.settleCounters = []metric.Int64Counter{in.acked, in.nacked, in.deadLettered, in.dropped, in.leaseLost}
	var err error
	in.inFlight, err = m.Int64UpDownCounter("bus.messages.in_flight", metric.WithUnit("{message}"),
		metric.WithDescription("Deliveries being handled or not yet settled."))
	errs = append(errs, err)
	in.handlerDuration, err = m.Float64Histogram("bus.handler.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of handler calls."), metric.WithExplicitBucketBoundaries(latencyBuckets...))
	errs = append(errs, err)
	in.e2eLatency, err = m.Float64Histogram("bus.e2e.latency", metric.WithUnit("s"),
		metric.WithDescription("Time from publish to the start of the handler."), metric.WithExplicitBucketBoundaries(latencyBuckets...))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("otelbus: create instruments: %w", err)
	}
	return nil
}

// Options returns the bus options that install both the handler and the
// publish middleware, for bus.New or bus.Open.
func (in *Instrumentation) Options() []bus.Option {
	return []bus.Option{bus.WithMiddleware(in.Middleware()), bus.WithPublishMiddleware(in.PublishMiddleware())}
}

// traceOn reports whether spans may record: tracing is on and not the
// global provider with nothing installed.
func (in *Instrumentation) traceOn() bool {
	return in.tracing && (in.unsetTP == nil || otel.GetTracerProvider() != in.unsetTP)
}

// metricsOn reports whether measurements may be kept: metrics are on and
// not the global provider with nothing installed.
func (in *Instrumentation) metricsOn() bool {
	return in.metrics && (in.unsetMP == nil || otel.GetMeterProvider() != in.unsetMP)
}

// attrsFor returns the cached attributes of topic and group ("" on the
// publish side).
func (in *Instrumentation) attrsFor(topic, group string) *attrs {
	k := attrKey{topic, group}
	in.mu.RLock()
	a := in.attrs[k]
	in.mu.RUnlock()
	if a != nil {
		return a
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if a = in.attrs[k]; a != nil {
		return a
	}
	a = &attrs{topic: topic, group: group}
	metricAttrs := []attribute.KeyValue{in.system, semconv.MessagingDestinationName(topic)}
	if group != "" {
		metricAttrs = append(metricAttrs, semconv.MessagingConsumerGroupName(group))
		a.spanName = "process " + topic
		a.span = append(append([]attribute.KeyValue(nil), metricAttrs...),
			semconv.MessagingOperationTypeProcess, semconv.MessagingOperationName("process"))
	} else {
		a.spanName = "send " + topic
		a.createName = "create " + topic
		send := []attribute.KeyValue{semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send")}
		a.span = append(append([]attribute.KeyValue(nil), metricAttrs...), send...)
		a.batchSend = a.span
		a.create = append(append([]attribute.KeyValue(nil), metricAttrs...),
			semconv.MessagingOperationTypeCreate, semconv.MessagingOperationName("create"))
	}
	set := attribute.NewSet(metricAttrs...)
	a.metric = metricAttrs
	a.add = []metric.AddOption{metric.WithAttributeSet(set)}
	a.rec = []metric.RecordOption{metric.WithAttributeSet(set)}
	in.attrs[k] = a
	return a
}

// Middleware returns the handler middleware: a consumer span per delivery
// and the consumer-side metrics. With both providers the explicit no-op
// ones it returns handlers unchanged.
func (in *Instrumentation) Middleware() bus.Middleware {
	return func(next bus.Handler) bus.Handler {
		if !in.tracing && !in.metrics {
			return next
		}
		// A wrapped handler serves one subscription: remember its
		// attributes to skip the shared map.
		var last atomic.Pointer[attrs]
		return func(ctx context.Context, d *bus.Delivery) error {
			tracing, metrics := in.traceOn(), in.metricsOn()
			if !tracing && !metrics {
				return next(ctx, d)
			}
			a := last.Load()
			if a == nil || a.topic != d.Topic || a.group != d.Group {
				a = in.attrsFor(d.Topic, d.Group)
				last.Store(a)
			}
			return in.handle(ctx, d, a, next, tracing, metrics)
		}
	}
}

func (in *Instrumentation) handle(ctx context.Context, d *bus.Delivery, a *attrs, next bus.Handler, tracing, metrics bool) error {
	start := time.Now()
	if metrics {
		in.delivered.Add(ctx, 1, a.add...)
		if !d.PublishedAt.IsZero() && in.e2eLatency.Enabled(ctx) {
			in.e2eLatency.Record(ctx, start.Sub(d.PublishedAt).Seconds(), a.rec...)
		}
	}

	sctx, span := ctx, noSpan
	if tracing {
		pctx := ctx
		if len(d.Headers) > 0 {
			pctx = in.prop.Extract(ctx, headerCarrier(d.Headers))
		}
		kv := make([]attribute.KeyValue, 0, len(a.span)+3)
		kv = append(kv, a.span...)
		kv = append(kv,
			semconv.MessagingMessageID(d.ID),
			semconv.MessagingMessageBodySize(len(d.Payload)),
			AttemptKey.Int(d.Attempt),
		)
		sctx, span = in.tracer.Start(pctx, a.spanName, consumerKind, trace.WithAttributes(kv...))
	}
	recording := span.IsRecording()

	var st *settleState
	if recording || (metrics && in.settleEnabled(ctx)) {
		st = &settleState{in: in, a: a, span: span, recording: recording, d: d}
		st.left.Store(2)
		in.inFlight.Add(ctx, 1, a.add...)
		d.OnSettle(st.settled)
	}

	err := in.call(sctx, d, next, a, span, st)
	if metrics && in.handlerDuration.Enabled(ctx) {
		in.handlerDuration.Record(ctx, time.Since(start).Seconds(), a.rec...)
	}
	if err != nil {
		if metrics {
			in.failed.Add(ctx, 1, a.add...)
		}
		if recording {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	if st != nil {
		st.done()
	} else {
		span.End()
	}
	return err
}

// call runs next; if it panics the span state is still finished before
// the panic goes on to the bus.
func (in *Instrumentation) call(ctx context.Context, d *bus.Delivery, next bus.Handler, a *attrs, span trace.Span, st *settleState) (err error) {
	ok := false
	defer func() {
		if !ok {
			if span.IsRecording() {
				span.SetStatus(codes.Error, "handler panic")
			}
			in.failed.Add(ctx, 1, a.add...)
			if st != nil {
				st.done()
			} else {
				span.End()
			}
		}
	}()
	err = next(ctx, d)
	ok = true
	return err
}

// settleEnabled reports whether any settlement instrument records.
func (in *Instrumentation) settleEnabled(ctx context.Context) bool {
	if in.inFlight.Enabled(ctx) {
		return true
	}
	for _, c := range in.settleCounters {
		if c.Enabled(ctx) {
			return true
		}
	}
	return false
}

// settleState ends the consumer span and the in-flight count once both
// the handler has returned and the delivery is settled.
type settleState struct {
	in        *Instrumentation
	a         *attrs
	span      trace.Span
	recording bool
	left      atomic.Int32
	d         *bus.Delivery
}

func (s *settleState) settled(o bus.Outcome, err error) {
	ctx := context.Background()
	var c metric.Int64Counter
	switch o {
	case bus.OutcomeAcked:
		c = s.in.acked
	case bus.OutcomeNacked:
		c = s.in.nacked
	case bus.OutcomeDeadLettered:
		c = s.in.deadLettered
	case bus.OutcomeDropped:
		c = s.in.dropped
	case bus.OutcomeLeaseLost:
		c = s.in.leaseLost
	}
	if c != nil {
		if code := s.d.DeadLetterCode(); code != "" && (o == bus.OutcomeDeadLettered || o == bus.OutcomeDropped) {
			c.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), s.a.metric...), DeadLetterCodeKey.String(string(code)))...)))
		} else {
			c.Add(ctx, 1, s.a.add...)
		}
	}
	if s.recording {
		s.span.SetAttributes(OutcomeKey.String(o.String()))
		if err != nil {
			s.span.RecordError(err, trace.WithAttributes(attribute.String("bus.settle", o.String())))
			s.span.SetStatus(codes.Error, err.Error())
		}
	}
	s.done()
}

func (s *settleState) done() {
	if s.left.Add(-1) != 0 {
		return
	}
	s.span.End()
	s.in.inFlight.Add(context.Background(), -1, s.a.add...)
}

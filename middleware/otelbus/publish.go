package otelbus

import (
	"context"
	"errors"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/middleware"
)

// PublishMiddleware returns the publish middleware: producer spans, trace
// context in the message headers, and the publish counters. With both
// providers the explicit no-op ones it publishes unchanged.
func (in *Instrumentation) PublishMiddleware() bus.PublishMiddleware {
	return func(next bus.Publisher) bus.Publisher {
		if !in.tracing && !in.metrics {
			return next
		}
		// Most publishers use few topics: remember the last one.
		var last atomic.Pointer[attrs]
		return middleware.PublishFunc(func(ctx context.Context, topic string, msgs ...*bus.Message) error {
			tracing, metrics := in.traceOn(), in.metricsOn()
			if len(msgs) == 0 || (!tracing && !metrics) {
				return next.Publish(ctx, topic, msgs...)
			}
			a := last.Load()
			if a == nil || a.topic != topic {
				a = in.attrsFor(topic, "")
				last.Store(a)
			}
			var err error
			if !tracing {
				err = next.Publish(ctx, topic, msgs...)
			} else if len(msgs) == 1 {
				err = in.publishOne(ctx, topic, msgs, a, next)
			} else {
				err = in.publishBatch(ctx, topic, msgs, a, next)
			}
			if !metrics {
				return err
			}
			failed := failedCount(err, len(msgs))
			if ok := len(msgs) - failed; ok > 0 {
				in.published.Add(ctx, int64(ok), a.add...)
			}
			if failed > 0 {
				in.publishFailed.Add(ctx, int64(failed), a.add...)
			}
			return err
		})
	}
}

func (in *Instrumentation) publishOne(ctx context.Context, topic string, msgs []*bus.Message, a *attrs, next bus.Publisher) error {
	sctx, span := in.tracer.Start(ctx, a.spanName, producerKind, trace.WithAttributes(messageAttrs(a.span, msgs[0])...))
	inj := getInjector(msgs)
	in.prop.Inject(sctx, inj)
	out := inj.out
	putInjector(inj)
	err := next.Publish(sctx, topic, out...)
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return err
}

// messageAttrs returns base plus the attributes of m.
func messageAttrs(base []attribute.KeyValue, m *bus.Message) []attribute.KeyValue {
	if m == nil {
		return base
	}
	kv := make([]attribute.KeyValue, 0, len(base)+2)
	kv = append(kv, base...)
	return append(kv, semconv.MessagingMessageID(m.ID), semconv.MessagingMessageBodySize(len(m.Payload)))
}

func (in *Instrumentation) publishBatch(ctx context.Context, topic string, msgs []*bus.Message, a *attrs, next bus.Publisher) error {
	spans := make([]trace.Span, len(msgs))
	inj := getInjector(msgs)
	defer putInjector(inj)
	var links []trace.Link
	for i, m := range msgs {
		cctx, span := in.tracer.Start(ctx, a.createName, producerKind, trace.WithAttributes(messageAttrs(a.create, m)...))
		spans[i] = span
		if span.IsRecording() {
			links = append(links, trace.Link{SpanContext: span.SpanContext()})
		}
		inj.at(i)
		in.prop.Inject(cctx, inj)
	}
	kv := append(append(make([]attribute.KeyValue, 0, len(a.batchSend)+1), a.batchSend...), semconv.MessagingBatchMessageCount(len(msgs)))
	sctx, send := in.tracer.Start(ctx, a.spanName, clientKind, trace.WithLinks(links...), trace.WithAttributes(kv...))
	err := next.Publish(sctx, topic, inj.out...)
	if err != nil {
		if send.IsRecording() {
			send.RecordError(err)
			send.SetStatus(codes.Error, err.Error())
		}
		markFailed(spans, err)
	}
	send.End()
	for _, s := range spans {
		s.End()
	}
	return err
}

// markFailed sets the error status on the create spans of the messages
// that failed: those a *bus.PublishError lists, or all of them when the
// batch was rejected or failed as a whole.
func markFailed(spans []trace.Span, err error) {
	var pe *bus.PublishError
	if !errors.As(err, &pe) || pe.Rejected {
		for _, s := range spans {
			if s.IsRecording() {
				s.RecordError(err)
				s.SetStatus(codes.Error, err.Error())
			}
		}
		return
	}
	for _, f := range pe.Failed {
		if f.Index >= 0 && f.Index < len(spans) && spans[f.Index].IsRecording() {
			spans[f.Index].RecordError(f.Err)
			spans[f.Index].SetStatus(codes.Error, f.Err.Error())
		}
	}
}

// failedCount returns how many of n messages err says were not published.
func failedCount(err error, n int) int {
	if err == nil {
		return 0
	}
	var pe *bus.PublishError
	if errors.As(err, &pe) && !pe.Rejected {
		return min(len(pe.Failed), n)
	}
	return n
}

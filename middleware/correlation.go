package middleware

import (
	"context"

	"github.com/eventbus-go/bus"
)

// HeaderCorrelationID is the header that carries the correlation ID.
const HeaderCorrelationID = "correlation-id"

type correlationKey struct{}

// WithCorrelationID returns a ctx that carries id as correlation ID.
// CorrelationIDPublish copies it into the messages published with ctx.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey{}, id)
}

// CorrelationIDFrom returns the correlation ID in ctx, if any.
func CorrelationIDFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(correlationKey{}).(string)
	return id, ok && id != ""
}

// CorrelationID returns handler middleware that puts the correlation ID of
// the consumed message into the handler ctx: its HeaderCorrelationID header
// or, when it has none, its message ID, which starts a new correlation.
// Read it with CorrelationIDFrom; with CorrelationIDPublish on the bus it
// flows into every message the handler publishes with that ctx.
func CorrelationID() bus.Middleware {
	return func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			id := d.Headers[HeaderCorrelationID]
			if id == "" {
				id = d.ID
			}
			return next(WithCorrelationID(ctx, id), d)
		}
	}
}

// CorrelationIDPublish returns publish middleware that sets the
// HeaderCorrelationID header of each published message that has none to
// the correlation ID of ctx. Without one in ctx messages pass unchanged.
// The caller's messages are not modified: a message that gets the header
// is published as a copy.
func CorrelationIDPublish() bus.PublishMiddleware {
	return func(next bus.Publisher) bus.Publisher {
		return PublishFunc(func(ctx context.Context, topic string, msgs ...*bus.Message) error {
			id, ok := CorrelationIDFrom(ctx)
			if !ok {
				return next.Publish(ctx, topic, msgs...)
			}
			out := msgs
			for i, m := range msgs {
				if m == nil || m.Headers[HeaderCorrelationID] != "" {
					continue
				}
				if &out[0] == &msgs[0] {
					out = append([]*bus.Message(nil), msgs...)
				}
				out[i] = withHeader(m, HeaderCorrelationID, id)
			}
			return next.Publish(ctx, topic, out...)
		})
	}
}

// withHeader returns a copy of m with header k set to v.
func withHeader(m *bus.Message, k, v string) *bus.Message {
	cp := *m
	cp.Headers = make(map[string]string, len(m.Headers)+1)
	for hk, hv := range m.Headers {
		cp.Headers[hk] = hv
	}
	cp.Headers[k] = v
	return &cp
}

// PublishFunc turns a function into a bus.Publisher, for publish
// middleware (bus.PublishMiddleware) written as a closure.
type PublishFunc func(ctx context.Context, topic string, msgs ...*bus.Message) error

// Publish calls f.
func (f PublishFunc) Publish(ctx context.Context, topic string, msgs ...*bus.Message) error {
	return f(ctx, topic, msgs...)
}

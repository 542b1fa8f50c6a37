package otelbus

import (
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// DefaultSystem is the messaging.system attribute when WithSystem is not
// given.
const DefaultSystem = "bus"

// Option configures New.
type Option func(*config)

type config struct {
	tp     trace.TracerProvider
	mp     metric.MeterProvider
	prop   propagation.TextMapPropagator
	system string
}

// WithTracerProvider sets the tracer provider (default the global one).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithMeterProvider sets the meter provider (default the global one).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithPropagator sets the propagator that writes and reads trace context
// in message headers (default the global one, which is a no-op until one
// is installed with otel.SetTextMapPropagator; pass
// propagation.TraceContext{} to propagate W3C trace context regardless).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

// WithSystem sets the messaging.system attribute, usually the backend's
// name as in bus.Bus.Capabilities().Name (default DefaultSystem).
func WithSystem(name string) Option {
	return func(c *config) { c.system = name }
}

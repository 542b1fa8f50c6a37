package otelbus

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/eventbus-go/bus/observer"
)

// ErrorsMetric is the name of the counter Observer records into.
const ErrorsMetric = "bus.errors"

// InFlightBoundMetric is the name of the gauge Observer records the
// in-flight bound of autoscaled subscriptions into (see bus.WithAutoscale).
const InFlightBoundMetric = "bus.consumer.in_flight_bound"

// Attribute keys of ErrorsMetric.
const (
	ErrorScopeKey = attribute.Key("bus.error.scope")
	ErrorTopicKey = attribute.Key("messaging.destination.name")
	ErrorGroupKey = attribute.Key("messaging.consumer.group.name")
)

// Observer returns an observer.Observer that counts events in the
// OpenTelemetry counter ErrorsMetric ("bus.errors", unit {error}), with the attributes
// bus.error.scope (Scope.String()), messaging.destination.name and
// messaging.consumer.group.name (the latter two when the event has them).
// Events without an error (the recovery that ends an outage, a scaling
// decision) are not counted. Message IDs and error texts are not
// attributes: they would make every event its own time series. A nil mp
// uses the global meter provider.
//
// It also records each scaling decision of an autoscaled subscription
// (an event of observer.ScopeScale) in the gauge InFlightBoundMetric
// ("bus.consumer.in_flight_bound", unit {message}): the bound after the
// decision, with the attributes messaging.destination.name and
// messaging.consumer.group.name.
//
// It uses only the OpenTelemetry API; install an SDK meter provider to
// export the counts. Combine it with observer.Slog through observer.Multi to also log the
// errors.
func Observer(mp metric.MeterProvider) (observer.Observer, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	c, err := mp.Meter(ScopeName).Int64Counter(ErrorsMetric,
		metric.WithUnit("{error}"),
		metric.WithDescription("Errors the bus handled in the background, by scope."))
	if err != nil {
		return nil, fmt.Errorf("otelbus: create %s counter: %w", ErrorsMetric, err)
	}
	g, err := mp.Meter(ScopeName).Int64Gauge(InFlightBoundMetric,
		metric.WithUnit("{message}"),
		metric.WithDescription("The in-flight bound of an autoscaled subscription, after its last scaling decision."))
	if err != nil {
		return nil, fmt.Errorf("otelbus: create %s gauge: %w", InFlightBoundMetric, err)
	}
	return otelObserver{errors: c, bound: g}, nil
}

type otelObserver struct {
	errors metric.Int64Counter
	bound  metric.Int64Gauge
}

func (o otelObserver) Observe(ctx context.Context, e observer.Event) {
	if e.Scale != nil && o.bound.Enabled(ctx) {
		o.bound.Record(ctx, int64(e.Scale.To), metric.WithAttributes(ErrorTopicKey.String(e.Topic), ErrorGroupKey.String(e.Group)))
	}
	if e.Err == nil || !o.errors.Enabled(ctx) {
		return
	}
	attrs := make([]attribute.KeyValue, 1, 3)
	attrs[0] = ErrorScopeKey.String(e.Scope.String())
	if e.Topic != "" {
		attrs = append(attrs, ErrorTopicKey.String(e.Topic))
	}
	if e.Group != "" {
		attrs = append(attrs, ErrorGroupKey.String(e.Group))
	}
	o.errors.Add(ctx, 1, metric.WithAttributes(attrs...))
}

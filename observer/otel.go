package observer

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// OTelErrorsMetric is the name of the counter OTel records into.
const OTelErrorsMetric = "bus.errors"

// Attribute keys of OTelErrorsMetric.
const (
	OTelScopeKey = attribute.Key("bus.error.scope")
	OTelTopicKey = attribute.Key("messaging.destination.name")
	OTelGroupKey = attribute.Key("messaging.consumer.group.name")
)

// OTel returns an Observer that counts events in the OpenTelemetry counter
// OTelErrorsMetric ("bus.errors", unit {error}), with the attributes
// bus.error.scope (Scope.String()), messaging.destination.name and
// messaging.consumer.group.name (the latter two when the event has them).
// Message IDs and error texts are not attributes: they would make every
// event its own time series. A nil mp uses the global meter provider.
//
// It uses only the OpenTelemetry API; install an SDK meter provider to
// export the counts. Combine it with Slog through Multi to also log the
// errors.
func OTel(mp metric.MeterProvider) (Observer, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	c, err := mp.Meter("github.com/eventbus-go/bus/observer").Int64Counter(OTelErrorsMetric,
		metric.WithUnit("{error}"),
		metric.WithDescription("Errors the bus handled in the background, by scope."))
	if err != nil {
		return nil, fmt.Errorf("observer: create %s counter: %w", OTelErrorsMetric, err)
	}
	return otelObserver{errors: c}, nil
}

type otelObserver struct{ errors metric.Int64Counter }

func (o otelObserver) Observe(ctx context.Context, e Event) {
	if !o.errors.Enabled(ctx) {
		return
	}
	attrs := make([]attribute.KeyValue, 1, 3)
	attrs[0] = OTelScopeKey.String(e.Scope.String())
	if e.Topic != "" {
		attrs = append(attrs, OTelTopicKey.String(e.Topic))
	}
	if e.Group != "" {
		attrs = append(attrs, OTelGroupKey.String(e.Group))
	}
	o.errors.Add(ctx, 1, metric.WithAttributes(attrs...))
}

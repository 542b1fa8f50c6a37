package outbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the relay's meter.
const ScopeName = "github.com/eventbus-go/bus/outbox"

// Metric names.
const (
	// PublishedMetric counts rows published (unit {message}, attribute
	// messaging.destination.name); its rate is the published per second.
	PublishedMetric = "bus.outbox.published"
	// DeadMetric counts rows moved to the dead table.
	DeadMetric = "bus.outbox.dead"
	// PendingMetric is the rows waiting in the outbox table (a gauge,
	// measured by each relay about once per poll interval).
	PendingMetric = "bus.outbox.pending"
	// LagMetric is the age of the oldest waiting row, in seconds (0 when
	// none waits): how far the relay is behind the commits.
	LagMetric = "bus.outbox.lag"
)

var topicKey = attribute.Key("messaging.destination.name")

// metrics are the relay's instruments and the last measured backlog.
type metrics struct {
	published, dead metric.Int64Counter
	reg             metric.Registration

	mu       sync.Mutex
	measured bool // unknown until the first measurement: not reported as 0
	pending  int64
	oldest   time.Time // zero when nothing waits
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	m := &metrics{}
	var err error
	if m.published, err = meter.Int64Counter(PublishedMetric, metric.WithUnit("{message}"),
		metric.WithDescription("Outbox rows published to the bus.")); err != nil {
		return nil, fmt.Errorf("outbox: create %s: %w", PublishedMetric, err)
	}
	if m.dead, err = meter.Int64Counter(DeadMetric, metric.WithUnit("{message}"),
		metric.WithDescription("Outbox rows moved to the dead table.")); err != nil {
		return nil, fmt.Errorf("outbox: create %s: %w", DeadMetric, err)
	}
	pending, err := meter.Int64ObservableGauge(PendingMetric, metric.WithUnit("{message}"),
		metric.WithDescription("Outbox rows waiting for the relay."))
	if err != nil {
		return nil, fmt.Errorf("outbox: create %s: %w", PendingMetric, err)
	}
	lag, err := meter.Float64ObservableGauge(LagMetric, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest outbox row waiting for the relay."))
	if err != nil {
		return nil, fmt.Errorf("outbox: create %s: %w", LagMetric, err)
	}
	m.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.measured {
			return nil
		}
		o.ObserveInt64(pending, m.pending)
		lagSec := 0.0
		if !m.oldest.IsZero() {
			lagSec = time.Since(m.oldest).Seconds()
		}
		o.ObserveFloat64(lag, lagSec)
		return nil
	}, pending, lag)
	if err != nil {
		return nil, fmt.Errorf("outbox: register gauges: %w", err)
	}
	return m, nil
}

func (m *metrics) setBacklog(pending int64, oldest time.Time) {
	m.mu.Lock()
	m.measured, m.pending, m.oldest = true, pending, oldest
	m.mu.Unlock()
}

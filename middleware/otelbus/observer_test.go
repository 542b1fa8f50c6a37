package otelbus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/eventbus-go/bus/middleware/otelbus"
	"github.com/eventbus-go/bus/observer"
)

func TestOTelCountsErrorsByScopeTopicAndGroup(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	o, err := otelbus.Observer(mp)
	require.NoError(t, err, "create observer")

	boom := errors.New("boom")
	events := []observer.Event{
		{Scope: observer.ScopeHandler, Topic: "orders", Group: "billing", MessageID: "m-1", Err: boom},
		{Scope: observer.ScopeHandler, Topic: "orders", Group: "billing", MessageID: "m-2", Err: boom},
		{Scope: observer.ScopeHandler, Topic: "orders", Group: "shipping", MessageID: "m-1", Err: boom},
		{Scope: observer.ScopeDeadLetter, Topic: "orders", Group: "billing", Err: boom},
		{Scope: observer.ScopeConnection, Err: boom},
	}
	for _, e := range events {
		o.Observe(context.Background(), e)
	}

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1, "one meter")
	require.Len(t, rm.ScopeMetrics[0].Metrics, 1, "one instrument")
	m := rm.ScopeMetrics[0].Metrics[0]
	assert.Equal(t, otelbus.ErrorsMetric, m.Name)
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "a sum, got %T", m.Data)
	assert.True(t, sum.IsMonotonic, "a counter")

	got := map[string]int64{}
	for _, dp := range sum.DataPoints {
		scope, _ := dp.Attributes.Value(otelbus.ErrorScopeKey)
		topic, _ := dp.Attributes.Value(otelbus.ErrorTopicKey)
		group, _ := dp.Attributes.Value(otelbus.ErrorGroupKey)
		_, hasID := dp.Attributes.Value(attribute.Key("messaging.message.id"))
		assert.False(t, hasID, "message IDs are not attributes")
		got[scope.AsString()+"/"+topic.AsString()+"/"+group.AsString()] = dp.Value
	}
	assert.Equal(t, map[string]int64{
		"handler/orders/billing":     2,
		"handler/orders/shipping":    1,
		"dead_letter/orders/billing": 1,
		"connection//":               1,
	}, got, "one series per scope, topic and group")
}

func TestOTelWithGlobalProviderIsNoopUntilSDKInstalled(t *testing.T) {
	o, err := otelbus.Observer(nil)
	require.NoError(t, err)
	assert.NotPanics(t, func() {
		o.Observe(context.Background(), observer.Event{Scope: observer.ScopeAck, Err: errors.New("x")})
	}, "the global provider discards events")
}

func TestOTelRecordsTheInFlightBoundOfScalingDecisionsAndCountsNoError(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	o, err := otelbus.Observer(mp)
	require.NoError(t, err, "create observer")

	for _, to := range []int{2, 4, 8} {
		o.Observe(context.Background(), observer.Event{Scope: observer.ScopeScale, Topic: "orders", Group: "billing",
			Scale: &observer.Scale{From: to / 2, To: to, Reason: "backlog", Backlog: 1000}})
	}
	o.Observe(context.Background(), observer.Event{Scope: observer.ScopeScale, Topic: "orders", Group: "shipping",
		Scale: &observer.Scale{From: 4, To: 2, Reason: "drained"}})

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1, "one meter")
	require.Len(t, rm.ScopeMetrics[0].Metrics, 1, "only the gauge has data: a decision is not an error")
	m := rm.ScopeMetrics[0].Metrics[0]
	assert.Equal(t, otelbus.InFlightBoundMetric, m.Name)
	gauge, ok := m.Data.(metricdata.Gauge[int64])
	require.True(t, ok, "a gauge, got %T", m.Data)
	got := map[string]int64{}
	for _, dp := range gauge.DataPoints {
		group, _ := dp.Attributes.Value(otelbus.ErrorGroupKey)
		got[group.AsString()] = dp.Value
	}
	assert.Equal(t, map[string]int64{"billing": 8, "shipping": 2}, got, "the last bound per topic and group")
}

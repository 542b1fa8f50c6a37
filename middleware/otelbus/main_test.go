package otelbus

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a bus with the SDK recording spans and metrics.
type env struct {
	bus      *bus.Bus
	spans    *tracetest.SpanRecorder
	tp       *sdktrace.TracerProvider
	reader   *sdkmetric.ManualReader
	settled  chan settlement
	outcomes bus.Middleware
}

type settlement struct {
	id      string
	outcome bus.Outcome
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), settled: make(chan settlement, 100)}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	ins, err := New(WithTracerProvider(e.tp), WithMeterProvider(mp),
		WithPropagator(propagation.TraceContext{}), WithSystem("inmemory"))
	require.NoError(t, err, "new instrumentation")
	e.outcomes = func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			id := d.ID
			d.OnSettle(func(o bus.Outcome, _ error) { e.settled <- settlement{id, o} })
			return next(ctx, d)
		}
	}
	e.bus, err = bus.Open(context.Background(), "mem://", ins.Options()...)
	require.NoError(t, err, "open bus")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, e.bus.Close(ctx), "close bus")
		require.NoError(t, e.tp.Shutdown(ctx))
		require.NoError(t, mp.Shutdown(ctx))
	})
	return e
}

func (e *env) subscribe(t *testing.T, topic string, h bus.Handler, opts ...bus.SubscribeOption) {
	t.Helper()
	opts = append([]bus.SubscribeOption{bus.WithMiddleware(e.outcomes)}, opts...)
	_, err := e.bus.Subscribe(context.Background(), topic, h, opts...)
	require.NoError(t, err, "subscribe")
}

func (e *env) waitSettled(t *testing.T, n int) []settlement {
	t.Helper()
	var got []settlement
	for len(got) < n {
		select {
		case s := <-e.settled:
			got = append(got, s)
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d deliveries settled within 5s", len(got), n)
		}
	}
	return got
}

// endedSpans waits until n spans named name have ended and returns them.
func (e *env) endedSpans(t *testing.T, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	var got []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		got = got[:0]
		for _, s := range e.spans.Ended() {
			if s.Name() == name {
				got = append(got, s)
			}
		}
		return len(got) >= n
	}, 5*time.Second, 5*time.Millisecond, "waiting for %d ended %q spans", n, name)
	require.Len(t, got, n, "ended %q spans", name)
	return got
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// metrics collects the metrics once.
func (e *env) metrics(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, e.reader.Collect(context.Background(), &rm), "collect metrics")
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sum returns the total of an int64 sum metric (0 when absent).
func sum(m map[string]metricdata.Aggregation, name string) int64 {
	s, ok := m[name].(metricdata.Sum[int64])
	if !ok {
		return 0
	}
	var n int64
	for _, dp := range s.DataPoints {
		n += dp.Value
	}
	return n
}

// count returns the number of recordings of a float64 histogram.
func count(m map[string]metricdata.Aggregation, name string) uint64 {
	h, ok := m[name].(metricdata.Histogram[float64])
	if !ok {
		return 0
	}
	var n uint64
	for _, dp := range h.DataPoints {
		n += dp.Count
	}
	return n
}

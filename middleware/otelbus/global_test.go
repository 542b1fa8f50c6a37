package otelbus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/middleware"
)

// TestGlobalProvidersSkipWorkUntilSDKInstalled changes the process-wide
// OpenTelemetry globals; BenchmarkE2E/otel-global-unset skips itself when
// it runs in the same process after this test.
func TestGlobalProvidersSkipWorkUntilSDKInstalled(t *testing.T) {
	if fmt.Sprintf("%T", otel.GetTracerProvider()) != "*global.tracerProvider" {
		t.Skip("an earlier run in this process (-count > 1) installed the global tracer provider")
	}
	ins, err := New(WithPropagator(propagation.TraceContext{}))
	require.NoError(t, err)
	m := &bus.Message{ID: "m-1"}
	var sent []*bus.Message
	pub := ins.PublishMiddleware()(middleware.PublishFunc(func(ctx context.Context, topic string, msgs ...*bus.Message) error {
		sent = msgs
		return nil
	}))
	require.NoError(t, pub.Publish(context.Background(), "orders", []*bus.Message{m}...))
	assert.Same(t, m, sent[0], "no SDK installed: the message passes as is")

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	otel.SetTracerProvider(tp)

	require.NoError(t, pub.Publish(context.Background(), "orders", []*bus.Message{m}...))
	assert.NotEmpty(t, sent[0].Headers["traceparent"], "after otel.SetTracerProvider the same instrumentation propagates")
	require.Eventually(t, func() bool { return len(rec.Ended()) == 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, "send orders", rec.Ended()[0].Name(), "span recorded through the global provider")
}

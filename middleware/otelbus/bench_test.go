package otelbus

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/cputime"
)

// BenchmarkE2E measures end-to-end throughput on inmemory (publish one
// message per call, wait until every message of the round is handled and
// acked) without instrumentation, with tracing and metrics on the no-op
// providers (explicit, and the unset global defaults), and with the SDK
// recording every span and metric (batch span processor with a discarding
// exporter, manual metric reader). Compare the
// ns/op of the three in one run for the overhead.
func BenchmarkE2E(b *testing.B) {
	b.Run("none", func(b *testing.B) { benchE2E(b, nil) })
	b.Run("otel-noop", func(b *testing.B) {
		ins, err := New(WithTracerProvider(tracenoop.NewTracerProvider()), WithMeterProvider(noop.NewMeterProvider()),
			WithPropagator(propagation.TraceContext{}))
		if err != nil {
			b.Fatal(err)
		}
		benchE2E(b, ins)
	})
	b.Run("otel-global-unset", func(b *testing.B) {
		// The defaults with no SDK installed: the global providers and
		// propagator, which forward to nothing.
		if fmt.Sprintf("%T", otel.GetTracerProvider()) != "*global.tracerProvider" {
			b.Skip("a test of this process installed a global tracer provider; run the benchmark with -run '^$'")
		}
		ins, err := New()
		if err != nil {
			b.Fatal(err)
		}
		benchE2E(b, ins)
	})
	b.Run("otel-sdk", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() {
			_ = tp.Shutdown(context.Background())
			_ = mp.Shutdown(context.Background())
		})
		ins, err := New(WithTracerProvider(tp), WithMeterProvider(mp), WithPropagator(propagation.TraceContext{}))
		if err != nil {
			b.Fatal(err)
		}
		benchE2E(b, ins)
	})
}

// round is how many messages one benchmark iteration publishes and waits
// for.
const round = 1000

func benchE2E(b *testing.B, ins *Instrumentation) {
	ctx := context.Background()
	var opts []bus.Option
	if ins != nil {
		opts = ins.Options()
	}
	bb, err := bus.Open(ctx, "mem://", opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := bb.Close(cctx); err != nil {
			b.Error(err)
		}
	}()
	var handled atomic.Int64
	roundDone := make(chan struct{}, 1)
	var target atomic.Int64
	_, err = bb.Subscribe(ctx, "bench", func(ctx context.Context, d *bus.Delivery) error {
		if handled.Add(1) == target.Load() {
			roundDone <- struct{}{}
		}
		return nil
	}, bus.WithMaxInFlight(256))
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 128)
	b.ReportAllocs()
	cpu0 := cputime.Process()
	for b.Loop() {
		target.Add(round)
		for range round {
			if err := bb.Publish(ctx, "bench", &bus.Message{Payload: payload}); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-roundDone:
		case <-time.After(30 * time.Second):
			b.Fatalf("round not handled: %d of %d", handled.Load(), target.Load())
		}
	}
	// CPU time per message is the steadier figure on a shared machine:
	// wall time there depends on what else runs.
	cpu := cputime.Process() - cpu0
	b.ReportMetric(float64(handled.Load())/b.Elapsed().Seconds(), "msgs/s")
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(handled.Load()), "cpu-ns/msg")
	}
}

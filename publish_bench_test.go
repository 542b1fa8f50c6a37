package bus_test

import (
	"context"
	"testing"

	"github.com/eventbus-go/bus"
)

// BenchmarkPublishPortableLayer measures what the bus adds to a Publish
// over a backend that does nothing: validation, ID assignment, the SPI
// copies and the batching bookkeeping. It reports allocations per message.
func BenchmarkPublishPortableLayer(b *testing.B) {
	payload := make([]byte, 256)
	b.Run("batch16", func(b *testing.B) {
		bs := bus.New(nopBackend{})
		defer bs.Close(context.Background())
		msgs := make([]bus.Message, 16)
		ptrs := make([]*bus.Message, 16)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			for i := range msgs {
				msgs[i] = bus.Message{Payload: payload}
				ptrs[i] = &msgs[i]
			}
			if err := bs.Publish(ctx, "bench", ptrs...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*16), "ns/msg")
	})
	b.Run("parallel1", func(b *testing.B) {
		bs := bus.New(nopBackend{})
		defer bs.Close(context.Background())
		ctx := context.Background()
		b.ReportAllocs()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			var m bus.Message
			for pb.Next() {
				m = bus.Message{Payload: payload}
				if err := bs.Publish(ctx, "bench", &m); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

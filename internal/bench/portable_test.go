package bench

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// The benchmarks of this file measure the portable layer alone, over
// backends that do no I/O: what the bus itself costs per message.

// nopBackend accepts every publish and delivers nothing.
type nopBackend struct{}

func (nopBackend) Publish(context.Context, string, []*backend.Message) error { return nil }
func (nopBackend) Subscribe(context.Context, string, backend.SubscribeConfig) (backend.Subscription, error) {
	return nopSub{}, nil
}
func (nopBackend) Capabilities() bus.Capabilities {
	return bus.Capabilities{Name: "nop", Redelivery: true, ConsumerGroups: true}
}
func (nopBackend) Close() error { return nil }

type nopSub struct{}

func (nopSub) Receive(ctx context.Context, _ int) ([]*backend.Message, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (nopSub) Ack(context.Context, []backend.AckID) error               { return nil }
func (nopSub) Nack(context.Context, backend.AckID, time.Duration) error { return nil }
func (nopSub) Close() error                                             { return nil }

// genBackend hands out pre-built messages as fast as the bus asks, so a
// benchmark over it measures the portable layer alone.
type genBackend struct {
	nopBackend
	msgs  []*backend.Message
	next  atomic.Int64
	limit int64
}

func (g *genBackend) Subscribe(context.Context, string, backend.SubscribeConfig) (backend.Subscription, error) {
	return &genSub{g: g}, nil
}

type genSub struct {
	nopSub
	g *genBackend
}

func (s *genSub) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	start := s.g.next.Add(int64(max)) - int64(max)
	if start >= s.g.limit {
		s.g.next.Add(-int64(max))
		<-ctx.Done()
		return nil, ctx.Err()
	}
	end := min(start+int64(max), s.g.limit)
	s.g.next.Add(end - start - int64(max))
	out := make([]*backend.Message, 0, end-start)
	for i := start; i < end; i++ {
		out = append(out, s.g.msgs[i%int64(len(s.g.msgs))])
	}
	return out, nil
}

func BenchmarkPortableLayerDispatchAndAck(b *testing.B) {
	b.Run("events=off", func(b *testing.B) { benchDispatchAndAck(b) })
	// With lifecycle events on: the handler's side adds no allocation
	// per message; the emitter's, a few per packed message.
	b.Run("events=on", func(b *testing.B) {
		benchDispatchAndAck(b, bus.WithEvents("bus.events"), bus.WithObserver(observer.Nop()))
	})
}

func benchDispatchAndAck(b *testing.B, opts ...bus.Option) {
	g := &genBackend{msgs: make([]*backend.Message, 1024)}
	for i := range g.msgs {
		g.msgs[i] = &backend.Message{ID: "id-" + strconv.Itoa(i), Payload: make([]byte, 256), Attempt: 1, AckID: i, PublishedAt: time.Now()}
	}
	const total = 1 << 20
	g.limit = total
	bb := bus.New(g, opts...)
	var done sync.WaitGroup
	done.Add(total)
	var count atomic.Int64
	b.ResetTimer()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := bb.Subscribe(context.Background(), "t", func(context.Context, *bus.Delivery) error {
		count.Add(1)
		done.Done()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	done.Wait()
	el := time.Since(start)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(total)/el.Seconds(), "msgs/s")
	// Heap allocations per delivered message, the backend's Receive
	// (one slice per call) included.
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/msg")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/total, "B/msg")
	_ = bb.Close(context.Background())
}

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

package bench

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// The benchmarks of this file put the typed layer (bus.Topic with the
// JSON codec) beside the untyped path, over backends that do no I/O: what
// a typed publish and a typed subscription cost per message, and how
// much of that is encoding/json.

// typedOrder is an event of about 256 bytes as JSON.
type typedOrder struct {
	ID       string   `json:"id"`
	Customer string   `json:"customer"`
	Cents    int64    `json:"cents"`
	Currency string   `json:"currency"`
	Items    []string `json:"items"`
	Note     string   `json:"note"`
}

func sampleOrder(i int) typedOrder {
	return typedOrder{
		ID: "order-" + strconv.Itoa(i), Customer: "customer-7", Cents: 125000, Currency: "EUR",
		Items: []string{"sku-1001", "sku-1002", "sku-1003"}, Note: strings.Repeat("n", 120),
	}
}

// BenchmarkTypedPublish publishes one message per call over a backend
// that does nothing: untyped with a payload already encoded, untyped
// with json.Marshal by hand, and typed (Topic.Publish, the JSON codec).
func BenchmarkTypedPublish(b *testing.B) {
	ctx := context.Background()
	ev := sampleOrder(1)
	payload, _ := json.Marshal(ev)
	b.Run("untyped-bytes", func(b *testing.B) {
		bs := bus.New(nopBackend{})
		defer bs.Close(ctx)
		b.ReportAllocs()
		for b.Loop() {
			if err := bs.Publish(ctx, "bench", &bus.Message{Payload: payload}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/msg")
	})
	b.Run("untyped-json", func(b *testing.B) {
		bs := bus.New(nopBackend{})
		defer bs.Close(ctx)
		b.ReportAllocs()
		for b.Loop() {
			p, err := json.Marshal(ev)
			if err != nil {
				b.Fatal(err)
			}
			if err := bs.Publish(ctx, "bench", &bus.Message{Payload: p, Headers: map[string]string{"content-type": "application/json"}}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/msg")
	})
	b.Run("typed-json", func(b *testing.B) {
		bs := bus.New(nopBackend{})
		defer bs.Close(ctx)
		topic := bus.NewTopic[typedOrder]("bench")
		b.ReportAllocs()
		for b.Loop() {
			if err := topic.Publish(ctx, bs, ev); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/msg")
	})
}

// BenchmarkTypedConsume delivers 2^16 messages per round through a subscription
// over a backend that hands them out as fast as the bus asks: an untyped
// handler that does not decode, one that calls json.Unmarshal itself,
// and a typed subscription (Topic.Subscribe, the JSON codec).
func BenchmarkTypedConsume(b *testing.B) {
	b.Run("untyped-bytes", func(b *testing.B) {
		benchConsume(b, func(bs *bus.Bus, done func()) error {
			_, err := bs.Subscribe(context.Background(), "bench", func(context.Context, *bus.Delivery) error {
				done()
				return nil
			})
			return err
		})
	})
	b.Run("untyped-json", func(b *testing.B) {
		benchConsume(b, func(bs *bus.Bus, done func()) error {
			_, err := bs.Subscribe(context.Background(), "bench", func(_ context.Context, d *bus.Delivery) error {
				var v typedOrder
				if err := json.Unmarshal(d.Payload, &v); err != nil {
					return bus.Reject(err)
				}
				done()
				return nil
			})
			return err
		})
	})
	b.Run("typed-json", func(b *testing.B) {
		benchConsume(b, func(bs *bus.Bus, done func()) error {
			topic := bus.NewTopic[typedOrder]("bench")
			_, err := topic.Subscribe(context.Background(), bs, func(context.Context, typedOrder, *bus.Delivery) error {
				done()
				return nil
			})
			return err
		})
	})
}

func benchConsume(b *testing.B, subscribe func(bs *bus.Bus, done func()) error) {
	topic := bus.NewTopic[typedOrder]("bench")
	g := &genBackend{msgs: make([]*backend.Message, 1024)}
	for i := range g.msgs {
		m, err := topic.Message(sampleOrder(i))
		if err != nil {
			b.Fatal(err)
		}
		g.msgs[i] = &backend.Message{ID: "id-" + strconv.Itoa(i), Headers: m.Headers, Payload: m.Payload, Attempt: 1, AckID: i, PublishedAt: time.Now()}
	}
	const total = 1 << 16
	var el time.Duration
	var mallocs, bytes uint64
	for b.Loop() {
		g.next.Store(0)
		g.limit = total
		bs := bus.New(g)
		var wg sync.WaitGroup
		wg.Add(total)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		if err := subscribe(bs, wg.Done); err != nil {
			b.Fatal(err)
		}
		wg.Wait()
		el += time.Since(start)
		runtime.ReadMemStats(&after)
		mallocs += after.Mallocs - before.Mallocs
		bytes += after.TotalAlloc - before.TotalAlloc
		_ = bs.Close(context.Background())
	}
	n := float64(total * b.N)
	b.ReportMetric(n/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(el.Nanoseconds())/n, "ns/msg")
	b.ReportMetric(float64(mallocs)/n, "allocs/msg")
	b.ReportMetric(float64(bytes)/n, "B/msg")
}

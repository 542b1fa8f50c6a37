package redisstream_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
)

// BenchmarkSubscriberHeapWithDelayedBacklog measures the live heap of a
// subscribing process while 1,000,000 messages wait at a private Redis
// server for their DeliverAt (an hour away): they are held by the server,
// not by the subscriber, whose heap stays that of an idle subscription.
//
//	go test ./redisstream -run '^$' -bench SubscriberHeapWithDelayedBacklog -benchtime 1x
func BenchmarkSubscriberHeapWithDelayedBacklog(b *testing.B) {
	const pending, batch = 1_000_000, 1000
	srv := redistest.Start(b)
	ctx := context.Background()
	for b.Loop() {
		pub, err := bus.Open(ctx, srv.URL()+"?dedup_window=0", bus.WithObserver(observer.Nop()))
		if err != nil {
			b.Fatal(err)
		}
		at := time.Now().Add(time.Hour)
		msgs := make([]*bus.Message, batch)
		for sent := 0; sent < pending; sent += batch {
			for i := range msgs {
				msgs[i] = &bus.Message{Payload: []byte("reminder"), DeliverAt: at}
			}
			if err := pub.Publish(ctx, "reminders", msgs...); err != nil {
				b.Fatal(err)
			}
		}
		if err := pub.Close(ctx); err != nil {
			b.Fatal(err)
		}
		msgs = nil
		sub, err := bus.Open(ctx, srv.URL(), bus.WithObserver(observer.Nop()))
		if err != nil {
			b.Fatal(err)
		}
		s, err := sub.Subscribe(ctx, "reminders", func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup("g"))
		if err != nil {
			b.Fatal(err)
		}
		ts, err := sub.Topics(ctx)
		if err != nil || len(ts) != 1 || ts[0].Scheduled != pending {
			b.Fatalf("want %d scheduled messages at the server, got %+v (%v)", pending, ts, err)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
		b.ReportMetric(pending, "pending")
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
		if err := sub.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

package watermill

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/observer"
)

// benchBacklog is the backlog one iteration of BenchmarkConsume drains.
const benchBacklog = 20000

// BenchmarkConsume measures draining a backlog on NATS JetStream: the
// bus's own API (256 in flight, as `bus bench --scenario consume`
// runs it), the bus through the adapter (MaxInFlight 16) and Watermill's
// NATS subscriber (its defaults, as in BenchmarkRouter, and with 16
// subscribers). Each iteration
// publishes benchBacklog 256-byte messages to a new topic, benchBatch to
// a call, after the group exists (untimed), then subscribes and reports
// msgs/s from the subscribe to the last message acked.
func BenchmarkConsume(b *testing.B) {
	natsURL := natstest.Start(b).URL()
	peers := []struct {
		name  string
		drain func(b *testing.B) float64
	}{
		{"bus-nats", func(b *testing.B) float64 { return drainBus(b, natsURL) }},
		{"bus-nats-adapter-inflight16", func(b *testing.B) float64 { return drainAdapter(b, natsURL, 16) }},
		{"watermill-nats", func(b *testing.B) float64 { return drainWatermillNATS(b, natsURL, 1) }},
		{"watermill-nats-subscribers16", func(b *testing.B) float64 { return drainWatermillNATS(b, natsURL, 16) }},
	}
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			var took float64
			for range b.N {
				took += p.drain(b)
			}
			b.ReportMetric(float64(b.N*benchBacklog)/took, "msgs/s")
		})
	}
}

// openBenchBus opens a bus on url and returns it with its close.
func openBenchBus(b testing.TB, url string) (*bus.Bus, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bb, err := bus.Open(ctx, url, bus.WithObserver(observer.Nop()))
	if err != nil {
		b.Fatal(err)
	}
	return bb, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := bb.Close(ctx); err != nil {
			b.Error(err)
		}
	}
}

// fillBus creates the group "bench" of a new topic and publishes the
// backlog to it; it returns the topic.
func fillBus(b *testing.B, bb *bus.Bus) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := "bench-" + watermill.NewShortUUID()
	if err := bb.CreateGroup(ctx, topic, "bench"); err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	for sent := 0; sent < benchBacklog; sent += benchBatch {
		msgs := make([]*bus.Message, benchBatch)
		for i := range msgs {
			msgs[i] = &bus.Message{Payload: payload}
		}
		if err := bb.Publish(ctx, topic, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	return topic
}

// drainBus drains a backlog through the bus's own API and returns the
// seconds it took.
func drainBus(b *testing.B, url string) float64 {
	b.StopTimer()
	bb, closeBus := openBenchBus(b, url)
	defer closeBus()
	topic := fillBus(b, bb)
	var handled atomic.Int64
	all := make(chan struct{})
	b.StartTimer()
	start := time.Now()
	sub, err := bb.Subscribe(context.Background(), topic, func(context.Context, *bus.Delivery) error {
		if handled.Add(1) == benchBacklog {
			close(all)
		}
		return nil
	}, bus.WithGroup("bench"), bus.WithMaxInFlight(256))
	if err != nil {
		b.Fatal(err)
	}
	waitAll(b, all, &handled)
	took := time.Since(start).Seconds()
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sub.Close(ctx); err != nil {
		b.Error(err)
	}
	return took
}

// drainAdapter drains a backlog through the adapter's Subscriber and
// returns the seconds it took.
func drainAdapter(b *testing.B, url string, inFlight int) float64 {
	b.StopTimer()
	bb, closeBus := openBenchBus(b, url)
	defer closeBus()
	topic := fillBus(b, bb)
	sub, err := NewSubscriber(bb, SubscriberConfig{Group: "bench", MaxInFlight: inFlight})
	if err != nil {
		b.Fatal(err)
	}
	return drainSubscriber(b, sub, topic)
}

// drainWatermillNATS drains a backlog through Watermill's NATS
// subscriber with that many subscribers and returns the seconds it took.
func drainWatermillNATS(b *testing.B, url string, subscribers int) float64 {
	b.StopTimer()
	pub, sub := benchWatermillNATSSubscribers(b, url, subscribers)
	defer func() {
		if err := pub.Close(); err != nil {
			b.Error(err)
		}
	}()
	topic := "bench-" + watermill.NewShortUUID()
	// The durable consumer delivers the stream from its start
	// (DeliverAll): what is published before the subscribe is the
	// backlog.
	payload := make([]byte, 256)
	for sent := 0; sent < benchBacklog; sent += benchBatch {
		msgs := make([]*message.Message, benchBatch)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), payload)
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	return drainSubscriber(b, sub, topic)
}

// drainSubscriber subscribes sub to topic, acks benchBacklog messages,
// closes sub and returns the seconds from the subscribe to the last ack.
func drainSubscriber(b *testing.B, sub message.Subscriber, topic string) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.StartTimer()
	start := time.Now()
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.After(2 * time.Minute)
	for n := 0; n < benchBacklog; n++ {
		select {
		case m, ok := <-msgs:
			if !ok {
				b.Fatalf("the subscription ended after %d of %d messages", n, benchBacklog)
			}
			m.Ack()
		case <-deadline:
			b.Fatalf("handled %d of %d messages within 2 minutes", n, benchBacklog)
		}
	}
	took := time.Since(start).Seconds()
	b.StopTimer()
	cancel()
	if err := sub.Close(); err != nil {
		b.Error(fmt.Errorf("close the subscriber: %w", err))
	}
	return took
}

// waitAll waits for all to close, at most two minutes.
func waitAll(b *testing.B, all <-chan struct{}, handled *atomic.Int64) {
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("handled %d of %d messages within 2 minutes", handled.Load(), benchBacklog)
	}
}

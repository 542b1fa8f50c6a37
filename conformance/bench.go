package conformance

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	bus "github.com/eventbus-go/bus"
)

// Benchmark shapes.
const (
	benchBatch       = 16   // messages per Publish
	benchPayload     = 256  // bytes per message
	benchBacklog     = 2000 // messages consumed per Consume iteration
	benchWindow      = 8192 // most messages in flight in E2E
	benchMaxInFlight = 256  // WithMaxInFlight of the benchmark subscribers
	benchDrain       = 2 * time.Minute
)

// RunBenchmarks runs the portable benchmarks against the backend and
// reports msgs/s for each:
//
//   - Publish: batches of 16 messages of 256 bytes, no subscriber.
//   - Consume: a group drains a backlog of 2,000 messages published while
//     it had no member, with AckOnSuccess; the prefill is not timed
//     (needs ConsumerGroups and Redelivery).
//   - E2E: publish and consume at once with AckOnSuccess, at most 8,192
//     messages in flight; the figure counts until every message was
//     handled.
func RunBenchmarks(b *testing.B, newBackend NewBackend) {
	b.Run("Publish", func(b *testing.B) { benchPublish(b, newBackend) })
	b.Run("Consume", func(b *testing.B) { benchConsume(b, newBackend) })
	b.Run("E2E", func(b *testing.B) { benchE2E(b, newBackend) })
}

// benchBus returns a bus over a fresh backend, closed when b ends.
func benchBus(b *testing.B, newBackend NewBackend) *bus.Bus {
	b.Helper()
	bs := bus.New(newBackend(b))
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), benchDrain)
		defer cancel()
		if err := bs.Close(ctx); err != nil {
			b.Errorf("close the bus: %v", err)
		}
	})
	return bs
}

// benchMessages returns a batch of benchBatch messages sharing one payload.
func benchMessages() []*bus.Message {
	payload := make([]byte, benchPayload)
	for i := range payload {
		payload[i] = byte(i)
	}
	batch := make([]*bus.Message, benchBatch)
	for i := range batch {
		batch[i] = &bus.Message{Payload: payload}
	}
	return batch
}

// resetIDs clears the IDs so Publish assigns fresh ones (backends that
// deduplicate by ID would drop a reused one).
func resetIDs(batch []*bus.Message) {
	for _, m := range batch {
		m.ID = ""
	}
}

func benchPublish(b *testing.B, newBackend NewBackend) {
	bs := benchBus(b, newBackend)
	topic := "bench.publish." + uniqueSuffix()
	batch := benchMessages()
	ctx := context.Background()
	sent := 0
	b.SetBytes(benchBatch * benchPayload)
	for b.Loop() {
		resetIDs(batch)
		if err := bs.Publish(ctx, topic, batch...); err != nil {
			b.Fatalf("publish: %v", err)
		}
		sent += len(batch)
	}
	b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "msgs/s")
}

func benchConsume(b *testing.B, newBackend NewBackend) {
	bs := benchBus(b, newBackend)
	if c := bs.Capabilities(); !c.ConsumerGroups || !c.Redelivery {
		b.Skipf("%s keeps no backlog for a group without members (needs ConsumerGroups and Redelivery)", c.Name)
	}
	ctx := context.Background()
	batch := benchMessages()
	backlog := int64(benchBacklog / benchBatch * benchBatch)
	consumed := int64(0)
	for b.Loop() {
		// Untimed: create the group, then fill its backlog while it has
		// no member.
		b.StopTimer()
		topic, group := "bench.consume."+uniqueSuffix(), "g-"+uniqueSuffix()
		noop := func(context.Context, *bus.Delivery) error { return nil }
		sub, err := bs.Subscribe(ctx, topic, noop, bus.WithGroup(group))
		if err != nil {
			b.Fatalf("create the group: %v", err)
		}
		if err := sub.Close(ctx); err != nil {
			b.Fatalf("close the group's first member: %v", err)
		}
		for range backlog / benchBatch {
			resetIDs(batch)
			if err := bs.Publish(ctx, topic, batch...); err != nil {
				b.Fatalf("prefill: %v", err)
			}
		}
		b.StartTimer()

		var got atomic.Int64
		all := make(chan struct{})
		sub, err = bs.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
			if got.Add(1) == backlog {
				close(all)
			}
			return nil
		}, bus.WithGroup(group), bus.WithMaxInFlight(benchMaxInFlight), bus.WithAckTimeout(benchDrain))
		if err != nil {
			b.Fatalf("subscribe: %v", err)
		}
		select {
		case <-all:
		case <-time.After(benchDrain):
			b.Fatalf("consumed %d of %d within %v", got.Load(), backlog, benchDrain)
		}
		if err := sub.Close(ctx); err != nil {
			b.Fatalf("close the subscription: %v", err)
		}
		consumed += backlog
	}
	b.ReportMetric(float64(consumed)/b.Elapsed().Seconds(), "msgs/s")
}

func benchE2E(b *testing.B, newBackend NewBackend) {
	bs := benchBus(b, newBackend)
	topic := "bench.e2e." + uniqueSuffix()
	ctx := context.Background()
	var received atomic.Int64
	progress := make(chan struct{}, 1)
	_, err := bs.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
		if received.Add(1)%256 == 0 {
			select {
			case progress <- struct{}{}:
			default:
			}
		}
		return nil
	}, bus.WithGroup("g-"+uniqueSuffix()), bus.WithMaxInFlight(benchMaxInFlight), bus.WithAckTimeout(benchDrain))
	if err != nil {
		b.Fatalf("subscribe: %v", err)
	}
	batch := benchMessages()
	var sent int64
	var start time.Time
	for b.Loop() {
		if start.IsZero() {
			start = time.Now()
		}
		resetIDs(batch)
		if err := bs.Publish(ctx, topic, batch...); err != nil {
			b.Fatalf("publish: %v", err)
		}
		sent += int64(len(batch))
		for sent-received.Load() > benchWindow {
			select {
			case <-progress:
			case <-time.After(time.Millisecond):
			}
		}
	}
	deadline := time.Now().Add(benchDrain)
	for received.Load() < sent {
		if time.Now().After(deadline) {
			b.Fatalf("handled %d of %d within %v", received.Load(), sent, benchDrain)
		}
		select {
		case <-progress:
		case <-time.After(time.Millisecond):
		}
	}
	b.ReportMetric(float64(sent)/time.Since(start).Seconds(), "msgs/s")
}

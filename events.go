package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/observer"
)

// startEvents starts the lifecycle events emitter (WithEvents). Its
// goroutine is the bus's: Close stops it after the subscriptions and
// before the backend.
func (b *Bus) startEvents() {
	topic := b.opts.events
	b.events = lifecycle.New(lifecycle.Config{
		Topic:   topic,
		Publish: func(ctx context.Context, msgs []*backend.Message) error { return b.publishEvents(ctx, topic, msgs) },
		Observe: func(e observer.Event) { b.opts.observer.Observe(context.Background(), e) },
	})
}

// publishEvents stores a batch of events on topic, partitioned like any
// message when the topic is.
func (b *Bus) publishEvents(ctx context.Context, topic string, msgs []*backend.Message) error {
	// The batcher wants an operation of the bus held; join succeeds
	// while Close waits for the emitter.
	b.ops.join()
	defer b.ops.leave()
	if err := b.boundEvents(ctx, topic); err != nil {
		return err
	}
	n, err := b.partitionsOf(ctx, topic)
	if err != nil {
		return err
	}
	if n > 1 {
		return b.publishPartitioned(ctx, topic, n, msgs, false)
	}
	return b.batcher.Publish(ctx, topic, msgs)
}

// DefaultEventsMaxAge and DefaultEventsMaxLen cap the lifecycle events
// topic unless WithEventsRetention says otherwise.
const (
	DefaultEventsMaxAge = 24 * time.Hour
	DefaultEventsMaxLen = 100_000
)

// boundEvents hands the events topic's retention bound to the backend
// before the first batch of events, until the backend has taken it. A
// partitioned events topic is bounded partition by partition. A backend
// without backend.RetentionBounder keeps the topic under its own
// retention.
func (b *Bus) boundEvents(ctx context.Context, topic string) error {
	if b.eventsBounded.Load() {
		return nil
	}
	rb, ok := b.be.(backend.RetentionBounder)
	bound := b.opts.eventsBound
	if !ok || bound == (backend.RetentionBound{}) {
		b.eventsBounded.Store(true)
		return nil
	}
	n, err := b.partitionsOf(ctx, topic)
	if err != nil {
		return err
	}
	topics := []string{topic}
	if n > 1 {
		topics = topics[:0]
		for i := range n {
			topics = append(topics, backend.PartitionTopic(topic, i))
		}
		if bound.MaxLen > 0 {
			bound.MaxLen = max(1, (bound.MaxLen+int64(n)-1)/int64(n))
		}
	}
	for _, t := range topics {
		if err := rb.BoundRetention(ctx, t, bound); err != nil {
			return fmt.Errorf("bus: bound the retention of events topic %q: %w", t, err)
		}
	}
	b.eventsBounded.Store(true)
	return nil
}

// eventHook is the lifecycle event sink of a consumer of s for s: it names the
// topic (not the partition) and the member.
func (b *Bus) eventHook(s *Subscription) *lifecycle.Sink {
	return b.events.Sink(s.topic, s.group, s.member)
}

// emitReplayed emits the replayed event of a dead letter of dlq, replayed
// at, when events are on.
func (b *Bus) emitReplayed(dlq string, dl *DeadLetter, at time.Time) {
	if b.events == nil || dl.Topic == b.opts.events {
		return
	}
	b.events.Emit(lifecycle.Event{
		Kind: lifecycle.Replayed, Time: at, MessageID: dl.ID, Key: dl.Key,
		Topic: dl.Topic, Group: dl.Group, Attempt: dl.Attempt, DeadLetter: dlq, Code: string(dl.Code),
	})
}

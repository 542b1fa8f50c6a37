package bus

import (
	"context"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// newTestConsumer returns a consumer over bsub that is never started: the
// tests drive its parts themselves. cfg needs only what the test sets;
// the rest gets small defaults.
func newTestConsumer(bsub backend.Subscription, cfg consumerConfig) *consumer {
	if cfg.Topic == "" {
		cfg.Topic, cfg.Group = "t", "g"
	}
	cfg.PubTopic = cfg.Topic
	cfg.MaxInFlight = max(cfg.MaxInFlight, 1)
	cfg.AckBatch, cfg.AckInterval = max(cfg.AckBatch, 1), time.Millisecond
	cfg.AckTimeout = max(cfg.AckTimeout, time.Second)
	cfg.MaxDeliveries = max(cfg.MaxDeliveries, 5)
	cfg.MaxPayload = backend.DefaultMaxPayload
	if cfg.AckMode == "" {
		cfg.AckMode = AckOnSuccess
	}
	if cfg.Observer == nil {
		cfg.Observer = observer.Nop()
	}
	if cfg.Handler == nil {
		cfg.Handler = func(context.Context, *Delivery) error { return nil }
	}
	return newConsumer(context.Background(), &Bus{}, nil, cfg, bsub)
}

// newTestRecord returns a record of m as dispatch makes it, holding one of
// c's in-flight slots; false when none is free.
func newTestRecord(c *consumer, m *backend.Message) (*record, bool) {
	if c.slots.TryAcquire(1, 1) == 0 {
		return nil, false
	}
	d := &record{sub: c, ackID: m.AckID, received: monoNow(), attempt: int32(max(m.Attempt, 1))}
	c.fill(d, m)
	c.unsettled.Add(1)
	return d, true
}

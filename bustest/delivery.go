package bustest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/recorder"
)

// setupTimeout bounds how long NewDelivery waits for its private bus.
const setupTimeout = 10 * time.Second

// Option configures NewDelivery.
type Option func(*config)

type config struct {
	topic       string
	group       string
	attempt     int
	publishedAt time.Time
	noDLQ       bool
	ackMode     bus.AckMode
	subOpts     []bus.SubscribeOption
}

// WithAckMode sets the ack mode of the subscription Run delivers through
// (default AckOnSuccess, as a subscription's). Give it here rather than
// through Subscribe: Run needs to know it.
func WithAckMode(m bus.AckMode) Option { return func(c *config) { c.ackMode = m } }

// Subscribe gives Run the options of the subscription under test (max
// deliveries, retry backoff, dead-letter topic, handler timeout,
// middleware ...), so that Run decides as that subscription would; the
// ack mode is WithAckMode's. The default is a subscription with the bus's
// defaults.
func Subscribe(opts ...bus.SubscribeOption) Option {
	return func(c *config) { c.subOpts = append(c.subOpts, opts...) }
}

// WithTopic sets Delivery.Topic (default "test").
func WithTopic(topic string) Option { return func(c *config) { c.topic = topic } }

// WithGroup sets Delivery.Group (default "default").
func WithGroup(group string) Option { return func(c *config) { c.group = group } }

// WithAttempt sets Delivery.Attempt (default 1).
func WithAttempt(n int) Option { return func(c *config) { c.attempt = n } }

// WithPublishedAt sets Delivery.PublishedAt (default: when NewDelivery ran).
func WithPublishedAt(t time.Time) Option { return func(c *config) { c.publishedAt = t } }

// WithoutDeadLetter turns dead-lettering off, so Reject drops the message
// (bus.OutcomeDropped) as it does in a subscription without a dead-letter
// topic.
func WithoutDeadLetter() Option { return func(c *config) { c.noDLQ = true } }

// Delivery is a *bus.Delivery whose settlements are recorded. Its methods
// are safe for concurrent use.
type Delivery struct {
	*bus.Delivery
	rec *recorder.Backend
}

// T is the part of testing.TB that NewDelivery uses; *testing.T and
// *testing.B satisfy it.
type T interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

var _ T = testing.TB(nil)

// NewDelivery returns a delivery of msg whose settlements are recorded. msg
// is copied; an empty ID gets a generated one, as Publish does. It fails
// the test when msg is invalid. When the test ends, a delivery still
// pending is released and the private bus is closed.
func NewDelivery(t T, msg *bus.Message, opts ...Option) *Delivery {
	t.Helper()
	cfg := config{topic: "test", group: "default", attempt: 1, publishedAt: time.Now()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.attempt < 1 {
		t.Fatalf("bustest: attempt %d, want >= 1", cfg.attempt)
	}
	if msg == nil {
		t.Fatalf("bustest: nil message")
	}
	rec := recorder.New(cfg.publishedAt, cfg.attempt)
	b := bus.New(rec)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var delivered *bus.Delivery
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if delivered != nil && delivered.Outcome() == bus.OutcomePending {
			// Release the slot so that Close need not wait for the lease;
			// the test has ended, so the record no longer matters.
			_ = delivered.Nack(ctx, 0)
		}
		if err := b.Close(ctx); err != nil && !errors.Is(err, bus.ErrClosed) {
			t.Errorf("bustest: close the private bus: %v", err)
		}
	})
	if err := b.Publish(ctx, cfg.topic, msg); err != nil {
		t.Fatalf("bustest: %v", err)
	}
	got := make(chan *bus.Delivery, 1)
	subOpts := []bus.SubscribeOption{
		bus.WithGroup(cfg.group), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(time.Hour),
	}
	if cfg.noDLQ {
		subOpts = append(subOpts, bus.WithDeadLetter(""))
	}
	_, err := b.Subscribe(ctx, cfg.topic, func(_ context.Context, d *bus.Delivery) error {
		got <- d
		return nil
	}, subOpts...)
	if err != nil {
		t.Fatalf("bustest: subscribe: %v", err)
	}
	select {
	case d := <-got:
		delivered = d
		return &Delivery{Delivery: d, rec: rec}
	case <-ctx.Done():
		t.Fatalf("bustest: the delivery did not arrive within %v", setupTimeout)
		return nil
	}
}

// Outcome is how the delivery was settled so far (bus.OutcomePending if
// not yet).
func (d *Delivery) Outcome() bus.Outcome { return d.Delivery.Outcome() }

// NackDelay is the delay of the Nack that settled the delivery, and
// whether it was nacked.
func (d *Delivery) NackDelay() (time.Duration, bool) {
	rec := d.rec.Record()
	return rec.NackDelay, rec.Nacked
}

// Snoozed reports whether the delivery was snoozed (Delivery.Snooze): a
// redelivery after NackDelay that does not count an attempt.
func (d *Delivery) Snoozed() bool {
	return d.rec.Record().Snoozed
}

// RejectReason is the reason text of the Reject (Delivery.Reject, or a
// returned bus.Reject) that dead-lettered the delivery, and whether it
// was dead-lettered. With
// WithoutDeadLetter a Reject drops the message instead and there is no
// reason to record.
func (d *Delivery) RejectReason() (string, bool) {
	rec := d.rec.Record()
	return rec.Reason, rec.DeadLettered
}

// DeadLetter is the copy the delivery was dead-lettered as, with its
// bus-dlq-* headers, or nil.
func (d *Delivery) DeadLetter() *bus.Message {
	return d.rec.Record().Dead
}

// Extensions counts the successful Extend calls.
func (d *Delivery) Extensions() int {
	return d.rec.Record().Extends
}

// String describes the recorded settlement, for test failure messages.
func (d *Delivery) String() string {
	delay, _ := d.NackDelay()
	reason, _ := d.RejectReason()
	return fmt.Sprintf("delivery %q: outcome %s, nack delay %v, reject reason %q, %d extensions",
		d.ID, d.Outcome(), delay, reason, d.Extensions())
}

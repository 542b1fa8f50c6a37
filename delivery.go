package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/engine"
)

// Outcome is how a delivery was settled.
type Outcome = engine.Outcome

// The outcomes of a delivery; Outcome.String names them "pending", "ack",
// "nack", "dead_letter", "dropped" and "expired".
const (
	// OutcomePending: not settled yet.
	OutcomePending = engine.OutcomePending
	// OutcomeAcked: acked; it will not be delivered to the group again.
	OutcomeAcked = engine.OutcomeAcked
	// OutcomeNacked: handed back for redelivery (after a delay), or
	// released by a shutdown.
	OutcomeNacked = engine.OutcomeNacked
	// OutcomeDeadLettered: moved to the dead-letter topic.
	OutcomeDeadLettered = engine.OutcomeDeadLettered
	// OutcomeDropped: rejected with dead-lettering off; acked and dropped.
	OutcomeDropped = engine.OutcomeDropped
	// OutcomeExpired: the lease ran out before it was settled (AckManual);
	// the backend redelivers it.
	OutcomeExpired = engine.OutcomeExpired
)

// Delivery is one received message plus its settlement methods. The
// settlement methods are safe for concurrent use; the first settlement
// wins and later ones return an error wrapping ErrAlreadySettled. A
// handler must not keep the Delivery after it is settled, except to read
// its fields.
type Delivery struct {
	Message
	// Topic the message was published to.
	Topic string
	// Group that received it.
	Group string
	// Attempt is 1 on the first delivery to the group.
	Attempt int
	// PublishedAt is when the bus accepted the message.
	PublishedAt time.Time

	// rec is the delivery engine's record, which holds this Delivery; nil
	// for a Delivery that did not come from a subscription.
	rec *engine.Delivery[Delivery]
}

// fill sets the public face of a delivery the engine received.
func fill(topic, group string) func(*engine.Delivery[Delivery], *backend.Message) {
	return func(r *engine.Delivery[Delivery], m *backend.Message) {
		d := &r.Pub
		d.Message = Message{ID: m.ID, Key: m.Key, Headers: m.Headers, Payload: m.Payload}
		d.Topic = topic
		d.Group = group
		d.Attempt = r.Attempt()
		d.PublishedAt = m.PublishedAt
		d.rec = r
	}
}

// info is the message of a Delivery, for the engine's events and
// dead-letter copies.
func info(d *Delivery) backend.Message {
	return backend.Message{ID: d.ID, Key: d.Key, Headers: d.Headers, Payload: d.Payload, Attempt: d.Attempt}
}

// detached is the error of a settlement on a zero Delivery.
func detached(op string) error {
	return fmt.Errorf("bus: %s: %w (use bustest.NewDelivery to test a handler)", op, ErrDetached)
}

// Ack settles the delivery as done. Acks are batched; a failed flush is
// reported to the observer and the message is redelivered after its lease.
func (d *Delivery) Ack(ctx context.Context) error {
	if d.rec == nil {
		return detached("ack")
	}
	return d.rec.Ack(ctx)
}

// Nack hands the delivery back for redelivery after delay (0 = at once),
// with Attempt+1.
func (d *Delivery) Nack(ctx context.Context, delay time.Duration) error {
	if d.rec == nil {
		return detached("nack")
	}
	return d.rec.Nack(ctx, delay)
}

// Reject settles the delivery as failed for good: it goes to the
// dead-letter topic (with reason in its headers) and is never retried. With
// dead-lettering off it is acked, dropped and reported to the observer.
func (d *Delivery) Reject(ctx context.Context, reason error) error {
	if d.rec == nil {
		return detached("reject")
	}
	return d.rec.Reject(ctx, reason)
}

// Extend restarts the lease of an unsettled delivery, for handlers that
// run longer than the ack timeout. It returns an error wrapping
// ErrUnsupported when the backend cannot extend leases.
func (d *Delivery) Extend(ctx context.Context) error {
	if d.rec == nil {
		return detached("extend")
	}
	return d.rec.Extend(ctx)
}

// OnSettle registers fn to be called once, with the outcome and the error
// of the settlement, when the delivery is settled (or its lease expires).
// If it is already settled fn is called at once. Middleware uses it to end
// spans and count outcomes. On a Delivery that did not come from a
// subscription fn is never called.
func (d *Delivery) OnSettle(fn func(Outcome, error)) {
	if d.rec != nil {
		d.rec.OnSettle(fn)
	}
}

// Outcome returns how the delivery was settled so far.
func (d *Delivery) Outcome() Outcome {
	if d.rec == nil {
		return OutcomePending
	}
	return d.rec.Outcome()
}

// DeadLetterCode is the reason code of a delivery that was dead-lettered
// (or dropped with dead-lettering off), and "" otherwise. Middleware reads
// it in an OnSettle hook, for example to label metrics.
func (d *Delivery) DeadLetterCode() backend.DeadLetterCode {
	if d.rec == nil {
		return ""
	}
	return d.rec.DeadLetterCode()
}

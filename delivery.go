package bus

import (
	"context"
	"fmt"
	"time"
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

	// rec is the bus's record of the delivery, which holds this
	// Delivery; nil for a Delivery that did not come from a subscription.
	rec *record
}

// Outcome is how a delivery was settled (Delivery.Outcome).
type Outcome int

// The outcomes of a delivery, named by Outcome.String.
const (
	// OutcomePending: not settled yet ("pending").
	OutcomePending Outcome = iota
	// OutcomeAcked: acked; it will not be delivered to the group again
	// ("ack").
	OutcomeAcked
	// OutcomeNacked: handed back for redelivery (after a delay), or
	// released by a shutdown ("nack").
	OutcomeNacked
	// OutcomeDeadLettered: moved to the dead-letter topic
	// ("dead_letter").
	OutcomeDeadLettered
	// OutcomeDropped: dead-lettered with dead-lettering off; acked and
	// dropped ("dropped").
	OutcomeDropped
	// OutcomeLeaseLost: its lease ran out, or was given up, before it was
	// settled; the backend delivers it again ("lease_lost"). Not to be
	// confused with a message past its ExpiresAt, which is dead-lettered
	// with code expired (OutcomeDeadLettered).
	OutcomeLeaseLost
)

var outcomeNames = [...]string{"pending", "ack", "nack", "dead_letter", "dropped", "lease_lost"}

// String returns "pending", "ack", "nack", "dead_letter", "dropped" or
// "lease_lost".
func (o Outcome) String() string {
	if o >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// detached is the error of a settlement on a zero Delivery.
func detached(op string) error {
	return fmt.Errorf("bus: %s: %w: the delivery is not from a subscription (use bustest.NewDelivery to test a handler)", op, ErrInvalidMessage)
}

// Ack settles the delivery as done. Acks are batched; a failed flush is
// reported to the observer and the message is redelivered after its lease.
func (d *Delivery) Ack(ctx context.Context) error {
	if d.rec == nil {
		return detached("ack")
	}
	return d.rec.ack(ctx)
}

// Nack hands the delivery back for redelivery after delay (0 = at once),
// with Attempt+1. A negative delay is refused with an error wrapping
// ErrInvalidOption, and the delivery stays unsettled; a delay longer than
// 100 years waits 100 years (see MaxDelay).
func (d *Delivery) Nack(ctx context.Context, delay time.Duration) error {
	if d.rec == nil {
		return detached("nack")
	}
	return d.rec.nack(ctx, delay)
}

// Reject settles the delivery as failed for good: it goes to the
// dead-letter topic (with reason in its headers) and is never retried. With
// dead-lettering off it is acked, dropped and reported to the observer.
func (d *Delivery) Reject(ctx context.Context, reason error) error {
	if d.rec == nil {
		return detached("reject")
	}
	return d.rec.reject(ctx, reason)
}

// Snooze gives the delivery back for redelivery after delay without
// counting an attempt: for a message whose time has not come (a resource
// is busy, a rate limit says "in 40 s"), as opposed to one that failed.
// It settles the delivery like Nack, in any ack mode but AckOnReceive;
// an AckOnSuccess handler can return Snooze(delay) instead. A snooze is
// free while the message's next delivery comes at most 24 hours after it
// was published; past that it counts like a nack (and the observer is
// told), so a message cannot circle forever unnoticed. A backend without
// backend.Snoozer counts every snooze; on NATS a message delivered about
// 1,000 times counts its snoozes from then on (see the nats package). A
// snooze that would come at or after the message's ExpiresAt
// dead-letters it with code expired. The delay must be positive: a delay
// of 0 or less is refused with an error wrapping ErrInvalidOption, and
// the delivery stays unsettled (Nack(ctx, 0) retries at once); one longer
// than 100 years waits 100 years (see MaxDelay).
func (d *Delivery) Snooze(ctx context.Context, delay time.Duration) error {
	if d.rec == nil {
		return detached("snooze")
	}
	return d.rec.snooze(ctx, delay)
}

// Extend restarts the lease of an unsettled delivery, for handlers that
// run longer than the ack timeout. It returns an error wrapping
// ErrUnsupported when the backend cannot extend leases.
func (d *Delivery) Extend(ctx context.Context) error {
	if d.rec == nil {
		return detached("extend")
	}
	return d.rec.extend(ctx)
}

// Outcome returns how the delivery was settled so far: OutcomePending
// until a settlement completes, and always for a Delivery that did not
// come from a subscription.
func (d *Delivery) Outcome() Outcome {
	if d.rec == nil {
		return OutcomePending
	}
	return d.rec.outcome()
}

// OnSettle registers fn to be called once, with the outcome and the error
// of the settlement, when the delivery is settled (or its lease is lost).
// If it is already settled fn is called at once. Middleware uses it to
// end spans and count outcomes. On a Delivery that did not come from a
// subscription fn is never called.
func (d *Delivery) OnSettle(fn func(Outcome, error)) {
	if d.rec != nil {
		d.rec.onSettle(fn)
	}
}

// DeadLetterCode is the reason code of a delivery that was dead-lettered
// (or dropped with dead-lettering off), and "" otherwise. Read it in an
// OnSettle hook, for example to label metrics.
func (d *Delivery) DeadLetterCode() DeadLetterCode {
	if d.rec == nil {
		return ""
	}
	return d.rec.deadLetterCode()
}

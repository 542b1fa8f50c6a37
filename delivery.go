package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/engine"
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

// fill sets the public face of a delivery the engine received, in a
// record the engine has just allocated (zeroed).
func fill(topic, group string) func(*engine.Delivery[Delivery], *backend.Message) {
	return func(r *engine.Delivery[Delivery], m *backend.Message) {
		// r is zeroed memory: only what is set is written, field by
		// field, as each pointer written while the collector marks costs
		// a write barrier.
		d := &r.Pub
		d.ID = m.ID
		if m.Key != "" {
			d.Key = m.Key
		}
		if len(m.Headers) > 0 {
			d.Headers, d.DeliverAt, d.ExpiresAt = takeTimes(m.Headers)
		} else if m.Headers != nil {
			d.Headers = m.Headers
		}
		d.Payload = m.Payload
		d.Topic = topic
		d.Group = group
		d.Attempt = r.Attempt()
		d.PublishedAt = m.PublishedAt
		d.rec = r
	}
}

// refill makes r a copy of from with attempt, for the retry of a keyed
// delivery (WithKeyOrdering).
func refill(r *engine.Delivery[Delivery], from *Delivery, attempt int) {
	r.Pub = *from
	r.Pub.Attempt = attempt
	r.Pub.rec = r
}

// info is the message of a Delivery, for the engine's events and
// dead-letter copies.
func info(d *Delivery) backend.Message {
	return backend.Message{ID: d.ID, Key: d.Key, Headers: d.Headers, Payload: d.Payload, Attempt: d.Attempt, PublishedAt: d.PublishedAt}
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
	return d.rec.Ack(ctx)
}

// Nack hands the delivery back for redelivery after delay (0 = at once),
// with Attempt+1. A negative delay is refused with an error wrapping
// ErrInvalidOption, and the delivery stays unsettled; a delay longer than
// 100 years waits 100 years (see MaxDelay).
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
	return d.rec.Snooze(ctx, delay)
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

// init lets the middleware package read a delivery's settlement (see
// middleware.OnSettle) without the Delivery exporting it.
func init() {
	engine.SettledOf = func(pub any) engine.Settled {
		if d, ok := pub.(*Delivery); ok && d.rec != nil {
			return d.rec
		}
		return nil
	}
}

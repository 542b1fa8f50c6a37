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

// fill sets the public face of a delivery the engine received.
func fill(topic, group string) func(*engine.Delivery[Delivery], *backend.Message) {
	return func(r *engine.Delivery[Delivery], m *backend.Message) {
		d := &r.Pub
		d.Message = Message{ID: m.ID, Key: m.Key, Headers: m.Headers, Payload: m.Payload}
		if len(m.Headers) > 0 {
			d.Headers, d.ExpiresAt = takeExpiry(m.Headers)
		}
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
	return backend.Message{ID: d.ID, Key: d.Key, Headers: d.Headers, Payload: d.Payload, Attempt: d.Attempt}
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

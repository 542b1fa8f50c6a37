package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// MaxResultSize is the largest result Delivery.SetResult accepts.
const MaxResultSize = 64 << 10

// DefaultResultTTL is how long a result is kept unless WithResultTTL
// says otherwise.
const DefaultResultTTL = time.Hour

// Bounds of WithResultTTL.
const (
	minResultTTL = time.Second
	maxResultTTL = 30 * 24 * time.Hour
)

// Waits between two looks of Bus.Result.
const (
	resultPollFirst = 10 * time.Millisecond
	resultPollMax   = 250 * time.Millisecond
)

// WithResultTTL sets how long the results this subscription's handlers
// leave (Delivery.SetResult) are kept: 1s..30 days, default
// DefaultResultTTL (1h).
func WithResultTTL(d time.Duration) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if d < minResultTTL || d > maxResultTTL {
			return fmt.Errorf("%w: result ttl %v, want %v..%v", ErrInvalidOption, d, minResultTTL, maxResultTTL)
		}
		s.resultTTL = d
		return nil
	})
}

// SetResult leaves a result of the delivery's handling (at most
// MaxResultSize bytes; a copy is kept), which the ack of the delivery
// stores under the message's ID and topic for the subscription's result
// ttl (WithResultTTL), for Bus.Result to read. On a backend whose
// subscriptions ack and store in one step (backend.ResultAcker: Redis,
// in one script, and PostgreSQL, in one transaction) both happen or
// neither, on an unpartitioned topic; elsewhere the result is stored
// first, so a crash before the ack leaves it stored and the message
// redelivered, and the next handling's result replaces it. A result set
// again replaces the one before; a delivery that is not acked (retried,
// dead-lettered) stores none. It needs Capabilities.Results (mem, Redis,
// NATS JetStream, PostgreSQL and RabbitMQ): elsewhere it returns an
// error wrapping ErrUnsupported. After the delivery was settled (in
// AckOnReceive, before the handler runs) it returns an error wrapping
// ErrAlreadySettled.
func (d *Delivery) SetResult(result []byte) error {
	if d.rec == nil {
		return detached("set result")
	}
	return d.rec.setResult(result)
}

func (d *record) setResult(result []byte) error {
	s := d.sub
	if s.results == nil {
		return fmt.Errorf("bus: set result of %q: %w: %s keeps no results", d.pub.ID, ErrUnsupported, s.cfg.Caps.Name)
	}
	if len(result) > MaxResultSize {
		return fmt.Errorf("bus: set result of %q: %w: %d bytes, more than %d", d.pub.ID, ErrPayloadTooLarge, len(result), MaxResultSize)
	}
	if d.claimed() {
		return d.alreadySettled("set result")
	}
	r := append(make([]byte, 0, len(result)), result...)
	s.mu.Lock()
	d.extLocked().result = &r
	s.mu.Unlock()
	return nil
}

// resultOf returns the result set on d, or nil.
func (d *record) resultOf() *[]byte {
	if d.ext.Load() == nil {
		return nil
	}
	return d.extResult()
}

// extResult is resultOf for a delivery whose ext is set.
func (d *record) extResult() *[]byte {
	d.sub.mu.Lock()
	defer d.sub.mu.Unlock()
	return d.ext.Load().result
}

// ackResult acks a claimed delivery and stores its result: in one step
// through backend.ResultAcker on an unpartitioned topic, else the result
// first and then the ack.
func (d *record) ackResult(ctx context.Context, result []byte) error {
	s := d.sub
	var err error
	if ra, ok := s.bsub.(backend.ResultAcker); ok && s.cfg.Topic == s.cfg.PubTopic {
		err = ra.AckResult(ctx, d.ackID, d.pub.ID, result, s.cfg.ResultTTL)
	} else if err = s.results.StoreResult(ctx, s.cfg.PubTopic, d.pub.ID, result, s.cfg.ResultTTL); err == nil {
		err = s.acks.add(d.ackID)
	}
	if err != nil {
		err = fmt.Errorf("bus: ack %q with its result: %w", d.pub.ID, err)
	}
	d.finish(OutcomeAcked, err)
	return err
}

// Result returns the result a handler left for message id of topic
// (Delivery.SetResult), waiting for it until ctx ends: a caller may ask
// before the message was handled, or published. It looks every 10 ms at
// first, backing off to every 250 ms. Without a deadline on ctx it waits
// as long as ctx lasts. A result whose ttl ran out is gone. It needs
// Capabilities.Results; elsewhere it returns an error wrapping
// ErrUnsupported.
func (b *Bus) Result(ctx context.Context, topic, id string) ([]byte, error) {
	if err := backend.ValidateTopic(topic); err != nil {
		return nil, fmt.Errorf("bus: result: %w", err)
	}
	if id == "" {
		return nil, fmt.Errorf("bus: result of %q: %w: empty message ID", topic, ErrInvalidMessage)
	}
	rs, ok := b.be.(backend.ResultStore)
	if !ok || !b.caps.Results {
		return nil, fmt.Errorf("bus: result of %q: %w: %s keeps no results", topic, ErrUnsupported, b.caps.Name)
	}
	if b.ops.isClosed() {
		return nil, fmt.Errorf("bus: result of %q: %w", topic, ErrClosed)
	}
	wait := resultPollFirst
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: result %q of %q: %w", id, topic, ctx.Err())
		}
		r, found, err := rs.Result(ctx, topic, id)
		if err != nil {
			return nil, fmt.Errorf("bus: result %q of %q: %w", id, topic, err)
		}
		if found {
			return r, nil
		}
		t.Reset(wait)
		wait = min(2*wait, resultPollMax)
	}
}

package rabbitmq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.ResultStore = (*Backend)(nil)

// resultName is the queue of the result of message id of topic:
// "bus.result.<topic>/<id>", hashed as queueName does.
func (b *Backend) resultName(topic, id string) string { return b.groupName("result", topic, id) }

// resultLinger is how much longer than its result's ttl an unused result
// queue lives (x-expires): the message expires first, and the queue goes
// after it.
const resultLinger = time.Second

// StoreResult implements backend.ResultStore with a classic queue per
// result that holds it as its one message: the queue of an earlier
// result of the message is deleted, a new one declared with x-expires of
// the ttl plus resultLinger (x-max-length 1), and the result published
// to it with the ttl as its expiration, confirmed. A result costs the
// broker a queue and its message until its ttl, and the queue until it
// has gone unused (no Result reads it) for the ttl plus resultLinger.
func (b *Backend) StoreResult(ctx context.Context, topic, id string, result []byte, ttl time.Duration) error {
	if err := validateResult(topic, id); err != nil {
		return fmt.Errorf("rabbitmq: store result: %w", err)
	}
	if b.isShut() {
		return fmt.Errorf("rabbitmq: store result of %q: %w", topic, backend.ErrClosed)
	}
	ttl = max(ttl, time.Millisecond)
	q := b.resultName(topic, id)
	args := amqp.Table{
		"x-queue-type": "classic",
		"x-expires":    (ttl + resultLinger).Milliseconds(),
		"x-max-length": 1,
		"x-overflow":   "drop-head",
	}
	err := b.pub.use(ctx, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return err
		}
		_, err := ch.QueueDeclare(q, true, false, false, false, args)
		return err
	})
	if err != nil {
		return fmt.Errorf("rabbitmq: store result of %q: %w", topic, err)
	}
	pub := amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		Expiration:   strconv.FormatInt(ttl.Milliseconds(), 10),
		Body:         result,
	}
	errs, err := b.publishConfirmed(ctx, []string{""}, []string{q}, []amqp.Publishing{pub})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: store result of %q: %w", topic, err)
	}
	return nil
}

// Result implements backend.ResultStore: a basic.get of the result's
// queue, and a nack that puts the message back as it was (its expiry
// kept). While one caller holds the message, another finds none, and the
// bus's Result looks again.
func (b *Backend) Result(ctx context.Context, topic, id string) ([]byte, bool, error) {
	if err := validateResult(topic, id); err != nil {
		return nil, false, fmt.Errorf("rabbitmq: result: %w", err)
	}
	if b.isShut() {
		return nil, false, fmt.Errorf("rabbitmq: result of %q: %w", topic, backend.ErrClosed)
	}
	var (
		body  []byte
		found bool
	)
	err := b.pub.use(ctx, func(ch *amqp.Channel) error {
		d, ok, err := ch.Get(b.resultName(topic, id), false)
		if err != nil || !ok {
			return err
		}
		body, found = d.Body, true
		return d.Nack(false, true)
	})
	if isAMQPCode(err, amqp.NotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("rabbitmq: result of %q: %w", topic, err)
	}
	if found && body == nil {
		body = []byte{}
	}
	return body, found, nil
}

func validateResult(topic, id string) error {
	if err := validateStoredTopic(topic); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: empty message ID", backend.ErrInvalidMessage)
	}
	return nil
}

package rabbitmq

import (
	"context"
	"fmt"
	"strconv"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.RetentionBounder = (*Backend)(nil)

// BoundRetention implements backend.RetentionBounder (the bus calls it
// for the lifecycle events topic). A message leaves a group's queue when
// the group acks it, and a topic with no group keeps nothing, so the
// bound is only for groups that stop consuming. MaxAge is applied as a
// per-message TTL (the AMQP expiration property) on every message this
// backend publishes to topic from now on without a DeliverAt still to
// come: each group's quorum queue drops such a message once it has been
// in the queue for MaxAge. The messages of one bound have equal TTLs and
// reach a queue in publish order, so the oldest is always at the head,
// where RabbitMQ expires messages; after the bound is lowered, messages
// published under the higher one stay until they expire and hold the
// newer ones behind them. A message a member holds unsettled does not
// expire. MaxLen is not applied: it would need x-max-length on queues
// that exist already, whose arguments RabbitMQ does not let change. It
// needs no I/O and returns at once.
func (b *Backend) BoundRetention(_ context.Context, topic string, bound backend.RetentionBound) error {
	if err := backend.ValidateTopic(topic); err != nil {
		return fmt.Errorf("rabbitmq: bound retention: %w", err)
	}
	if bound.MaxAge < 0 || bound.MaxLen < 0 {
		return fmt.Errorf("rabbitmq: bound retention of %q: %w: negative bound %+v", topic, backend.ErrInvalidOption, bound)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.retention == nil {
		b.retention = map[string]string{}
	}
	if bound.MaxAge <= 0 {
		delete(b.retention, topic)
		return nil
	}
	b.retention[topic] = strconv.FormatInt(max(bound.MaxAge.Milliseconds(), 1), 10)
	return nil
}

// expiration is the AMQP expiration of the messages published to topic
// ("": none).
func (b *Backend) expiration(topic string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.retention[topic]
}

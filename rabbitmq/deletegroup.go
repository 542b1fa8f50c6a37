package rabbitmq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupDeleter = (*Backend)(nil)

// DeleteGroup implements backend.GroupDeleter: it deletes the group's
// queue (what it holds and what its members hold unsettled; their
// consumers are cancelled, and their Receive fails), its release notes,
// its lock's state queue and its members stream, and gives up its lock
// when a holder of this backend holds it. Copies of the group's messages
// waiting in the shared hold queues (a nack with a delay, a Snooze) are
// dropped when their delay ends: the queue they dead-letter to is gone.
// Deleting a group that does not exist is not an error.
func (b *Backend) DeleteGroup(ctx context.Context, topic, group string) error {
	if err := validateStoredTopic(topic); err != nil {
		return fmt.Errorf("rabbitmq: delete group %q of %q: %w", group, topic, err)
	}
	if group == "" {
		return fmt.Errorf("rabbitmq: delete group of %q: %w: empty group", topic, backend.ErrInvalidOption)
	}
	if b.isShut() {
		return fmt.Errorf("rabbitmq: delete group %q of %q: %w", group, topic, backend.ErrClosed)
	}
	if err := b.dropGroupLock(ctx, topic, group); err != nil {
		return fmt.Errorf("rabbitmq: delete group %q of %q: %w", group, topic, err)
	}
	names := []string{b.queueName(topic, group), b.notesName(topic, group), b.lockStateName(topic, group)}
	if t, _, ok := backend.SplitPartitionTopic(topic); ok {
		names = append(names, b.membersName(t, group))
	} else {
		names = append(names, b.membersName(topic, group))
	}
	for _, q := range names {
		b.mu.Lock()
		delete(b.declared, q)
		b.mu.Unlock()
		if err := b.deleteQueue(ctx, q); err != nil {
			return fmt.Errorf("rabbitmq: delete group %q of %q: %w", group, topic, err)
		}
	}
	return nil
}

// dropGroupLock gives up the group's lock when a holder of this backend
// holds it, as a lapse does: the lock's queue is deleted with the rest.
func (b *Backend) dropGroupLock(ctx context.Context, topic, group string) error {
	q := b.lockName(topic, group)
	b.mu.Lock()
	hl := b.locks[q]
	b.mu.Unlock()
	if hl == nil {
		return nil
	}
	done, err := b.lockOp(ctx)
	if err != nil {
		return err
	}
	defer done()
	b.mu.Lock()
	hl = b.locks[q]
	b.mu.Unlock()
	if hl == nil {
		return nil
	}
	b.dropLock(q, hl)
	if conn, err := b.lockLink.get(ctx); err != nil || conn != hl.conn {
		return err // the queue died with its connection
	}
	err = b.onLockChannel(ctx, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(q, false, false, false)
		return err
	})
	if err != nil {
		b.lockLink.breakConn(hl.conn) // the broker deletes the queue with its connection
	}
	return nil
}

// deleteQueue deletes the queue q, on a channel of its own: a queue that
// does not exist is not an error.
func (b *Backend) deleteQueue(ctx context.Context, q string) error {
	err := b.pub.use(ctx, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(q, false, false, false)
		return err
	})
	if err != nil && !isAMQPCode(err, amqp.NotFound) {
		return fmt.Errorf("delete %q: %w", q, err)
	}
	return nil
}

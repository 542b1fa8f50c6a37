package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/eventbus-go/bus/backend"
)

// CreateGroup creates the consumer group group on topic, with no member,
// so that it keeps every message published after CreateGroup returns,
// even before its first member subscribes. An existing group is left
// where it stands. Subscribe creates a group too, at its StartFrom; a
// group created ahead matters where a new group cannot start from the
// oldest message (Capabilities.StartOldest false, as on RabbitMQ, whose
// group queue holds only what was published after it was declared), and
// for provisioning: a deploy that creates its groups before its
// publishers start loses nothing on any backend. On a partitioned topic
// it creates the group on every partition. Names are checked before any
// I/O; it returns by ctx's deadline.
func (b *Bus) CreateGroup(ctx context.Context, topic, group string) error {
	if b.optErr != nil {
		return b.optErr
	}
	if err := backend.ValidateTopic(topic); err != nil {
		return fmt.Errorf("bus: create group: %w", err)
	}
	if err := backend.ValidateTopic(group); err != nil {
		return fmt.Errorf("bus: create group %q on %q: %w: a group name must follow the topic rules", group, topic, ErrInvalidOption)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bus: create group %q on %q: %w", group, topic, err)
	}
	if !b.ops.enter() {
		return fmt.Errorf("bus: create group %q on %q: %w", group, topic, ErrClosed)
	}
	defer b.ops.leave()
	n, err := b.partitionsOf(ctx, topic)
	if err != nil {
		return fmt.Errorf("bus: create group %q on %q: %w", group, topic, err)
	}
	topics := []string{topic}
	if n > 1 {
		topics = topics[:0]
		for p := range n {
			topics = append(topics, backend.PartitionTopic(topic, p))
		}
	}
	for _, t := range topics {
		if err := b.createGroup(ctx, t, group); err != nil {
			return fmt.Errorf("bus: create group %q on %q: %w", group, t, err)
		}
	}
	return nil
}

// createGroup creates group on the stored topic t: through the backend's
// GroupCreator, or by a member that joins and leaves before any Receive.
func (b *Bus) createGroup(ctx context.Context, t, group string) error {
	if gc, ok := b.be.(backend.GroupCreator); ok {
		err := gc.CreateGroup(ctx, t, group)
		if !errors.Is(err, ErrUnsupported) {
			return err
		}
	}
	sub, err := b.be.Subscribe(ctx, t, backend.SubscribeConfig{
		Group:         group,
		StartFrom:     backend.StartNewest,
		AckTimeout:    defaultAckTimeout,
		MaxInFlight:   1,
		MaxDeliveries: defaultMaxDeliveries,
		Observer:      b.opts.observer,
	})
	if err != nil {
		return err
	}
	return sub.Close()
}

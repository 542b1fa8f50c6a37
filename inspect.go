package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/eventbus-go/bus/backend"
)

// This file holds the portable operations on a backend's state: listing
// topics and groups, and removing a topic. They need a backend that
// implements backend.Inspector (backend.TopicDeleter to remove a topic);
// without one they return an error wrapping ErrUnsupported. The dead-letter
// operations are in deadletters.go.

// peekPage is how many messages one Inspector.Peek call reads.
const peekPage = 256

func (b *Bus) inspector(op string) (backend.Inspector, error) {
	if b.optErr != nil {
		return nil, b.optErr
	}
	in, ok := b.be.(backend.Inspector)
	if !ok {
		return nil, fmt.Errorf("bus: %s: %w: %s has no Inspector", op, ErrUnsupported, b.caps.Name)
	}
	return in, nil
}

// Topics lists the backend's topics with their retained counts, sorted by
// name. A partition of a partitioned topic is listed as its own topic,
// "orders~3". DeadLetters marks the topics that hold dead letters, whatever
// their names (WithDeadLetter may name any topic): those whose oldest
// retained message carries the dead-letter headers; that reads one message
// per topic (none is marked where the backend cannot read a retained
// message: its Peek is unsupported).
func (b *Bus) Topics(ctx context.Context) ([]TopicInfo, error) {
	in, err := b.inspector("topics")
	if err != nil {
		return nil, err
	}
	ts, err := in.Topics(ctx)
	if err != nil {
		return nil, fmt.Errorf("bus: topics: %w", err)
	}
	for i := range ts {
		msgs, _, err := in.Peek(ctx, ts[i].Name, "", 1)
		if errors.Is(err, ErrUnsupported) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bus: topics: peek %q: %w", ts[i].Name, err)
		}
		ts[i].DeadLetters = len(msgs) > 0 && backend.IsDeadLetter(msgs[0])
	}
	return ts, nil
}

// Groups lists the consumer groups of topic with their lag and pending
// counts. On a partitioned topic it lists each group once per partition,
// with the partition and the member that owns it (from the group's live
// members, as they share the partitions out); given a partition's name
// ("orders~3", as Topics lists it), the groups of that partition.
func (b *Bus) Groups(ctx context.Context, topic string) ([]GroupInfo, error) {
	base, one, isPart := backend.SplitPartitionTopic(topic)
	if !isPart || backend.ValidateTopic(base) != nil {
		if err := backend.ValidateTopic(topic); err != nil {
			return nil, fmt.Errorf("bus: groups: %w", err)
		}
		base, one = topic, -1
	}
	in, err := b.inspector("groups")
	if err != nil {
		return nil, err
	}
	n, err := b.recordedPartitions(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("bus: groups of %q: %w", topic, err)
	}
	if n <= 1 {
		gs, err := in.Groups(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("bus: groups of %q: %w", topic, err)
		}
		return gs, nil
	}
	from, to := 0, n
	if one >= 0 {
		// One partition, by the name Topics lists it under.
		from, to = one, one+1
	}
	return b.partitionGroups(ctx, in, base, n, from, to)
}

// DeleteTopic removes topic: its retained messages and its consumer
// groups, and on a partitioned topic every partition and the partition
// count. Subscriptions still live on it may recreate their group or end
// with an error, as the backend documents. Deleting a topic that does not
// exist is not an error.
func (b *Bus) DeleteTopic(ctx context.Context, topic string) error {
	if err := backend.ValidateTopic(topic); err != nil {
		return fmt.Errorf("bus: delete topic: %w", err)
	}
	if b.optErr != nil {
		return b.optErr
	}
	d, ok := b.be.(backend.TopicDeleter)
	if !ok {
		return fmt.Errorf("bus: delete topic %q: %w: %s cannot delete topics", topic, ErrUnsupported, b.caps.Name)
	}
	n, err := b.recordedPartitions(ctx, topic)
	if err != nil {
		return fmt.Errorf("bus: delete topic %q: %w", topic, err)
	}
	if n > 1 {
		for p := range n {
			if err := d.DeleteTopic(ctx, backend.PartitionTopic(topic, p)); err != nil {
				return fmt.Errorf("bus: delete topic %q, partition %d: %w", topic, p, err)
			}
		}
	}
	if err := d.DeleteTopic(ctx, topic); err != nil {
		return fmt.Errorf("bus: delete topic %q: %w", topic, err)
	}
	b.parts.Delete(topic)
	return nil
}

// SeekGroup moves a consumer group of topic, as Pub/Sub seeks a
// subscription: the group then receives the messages from the target on,
// whether it had received or settled them before or not, and none before
// it. It needs a backend.GroupSeeker; backends document what happens to
// the deliveries in flight and whether the group's members must be
// stopped first. An unknown group is an error wrapping ErrNotFound.
func (b *Bus) SeekGroup(ctx context.Context, topic, group string, to SeekTarget) error {
	if err := backend.ValidateTopic(topic); err != nil {
		return fmt.Errorf("bus: seek group: %w", err)
	}
	if group == "" || to.Oldest && to.Newest || !to.Oldest && !to.Newest && to.Time.IsZero() {
		return fmt.Errorf("bus: seek group %q of %q: %w: give a group and one of Oldest, Newest or Time", group, topic, ErrInvalidOption)
	}
	if b.optErr != nil {
		return b.optErr
	}
	s, ok := b.be.(backend.GroupSeeker)
	if !ok {
		return fmt.Errorf("bus: seek group %q of %q: %w: %s cannot seek groups", group, topic, ErrUnsupported, b.caps.Name)
	}
	if err := s.SeekGroup(ctx, topic, group, to); err != nil {
		if errors.Is(err, backend.ErrUnknownGroup) {
			err = fmt.Errorf("%w: %w", backend.ErrNotFound, err)
		}
		return fmt.Errorf("bus: seek group %q of %q: %w", group, topic, err)
	}
	return nil
}

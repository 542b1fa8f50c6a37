package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupSeeker = (*Backend)(nil)

// SeekGroup implements backend.GroupSeeker. A consumer's deliver policy
// cannot change, so the group's durable consumer is re-created with the
// same configuration and the target's policy (all, new, or by start
// time). Its unacked deliveries are dropped with it. Members must be
// stopped first: a member that finds its consumer gone re-creates it where
// it stopped, so SeekGroup refuses a consumer with pull requests waiting.
func (b *Backend) SeekGroup(ctx context.Context, topic, group string, to backend.SeekTarget) error {
	if b.opts.CoreNATS {
		return fmt.Errorf("nats: seek group %q of %q: core NATS keeps no messages to seek", group, topic)
	}
	stream, name := b.streamFor(topic), b.consumerFor(topic, group)
	c, err := b.js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("nats: seek group %q of %q: %w", group, topic, backend.ErrUnknownGroup)
	}
	if err != nil {
		return fmt.Errorf("nats: seek group %q of %q: %w", group, topic, err)
	}
	info, err := idleConsumer(ctx, c)
	if err != nil {
		return fmt.Errorf("nats: seek group %q of %q: %w", group, topic, err)
	}
	cfg := info.Config
	cfg.OptStartSeq, cfg.OptStartTime = 0, nil
	switch {
	case to.Oldest:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	case to.Newest:
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	default:
		t := to.Time
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &t
	}
	if err := b.js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("nats: seek group %q of %q: %w", group, topic, err)
	}
	if _, err := b.js.CreateConsumer(ctx, stream, cfg); err != nil {
		return fmt.Errorf("nats: seek group %q of %q: re-create the consumer: %w", group, topic, err)
	}
	return nil
}

// idleConsumer returns the consumer's info once no pull request waits on
// it. A member that was just stopped leaves its last request at the server
// until it expires (longPoll), so a short wait is allowed before the
// consumer counts as having live members.
func idleConsumer(ctx context.Context, c jetstream.Consumer) (*jetstream.ConsumerInfo, error) {
	deadline := time.Now().Add(longPoll + responseGrace + time.Second)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		info, err := c.Info(ctx)
		if err != nil {
			return nil, err
		}
		if info.NumWaiting == 0 {
			return info, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the group has live members (%d pull requests waiting); stop them first", info.NumWaiting)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

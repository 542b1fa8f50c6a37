package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupDeleter = (*Backend)(nil)

// DeleteGroup implements backend.GroupDeleter on JetStream: it deletes
// the group's durable consumer (its position and unacked deliveries),
// the releases recorded for that consumer, and the group's lock. A
// member still pulling from the consumer re-creates it where it stopped
// (see SeekGroup); the bus deletes a broadcast group only after its
// member closed or stopped renewing the group's lease. Core NATS keeps
// no group state: there it returns an error wrapping ErrUnsupported.
func (b *Backend) DeleteGroup(ctx context.Context, topic, group string) error {
	if err := b.inspectable("delete group"); err != nil {
		return err
	}
	stream, name := b.streamFor(topic), b.consumerFor(topic, group)
	err := b.js.DeleteConsumer(ctx, stream, name)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("nats: delete group %q of %q: %w", group, topic, err)
	}
	if err := b.purgeKeys(ctx, b.releasedBucket(), stream+"."+name+".*"); err != nil {
		return fmt.Errorf("nats: delete group %q of %q: its releases: %w", group, topic, err)
	}
	if err := b.purgeKeys(ctx, b.bucketName("_LOCKS"), lockKey(topic, group)); err != nil {
		return fmt.Errorf("nats: delete group %q of %q: its lock: %w", group, topic, err)
	}
	return nil
}

// purgeKeys purges the keys of bucket that match filter, when the
// bucket exists.
func (b *Backend) purgeKeys(ctx context.Context, bucket, filter string) error {
	kv, err := b.js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for key := range lister.Keys() {
		if err := kv.Purge(ctx, key); err != nil {
			return err
		}
	}
	return nil
}

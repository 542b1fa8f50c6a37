package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupLocker = (*Backend)(nil)

// lockKeys are the lock of group on topic, its last holder and the
// topic's lock registry, in the topic's slot.
func (b *Backend) lockKeys(topic, group string) []string {
	k := newKeys(b.opts.Prefix, topic)
	return []string{k.stream + "#lock:" + group, k.stream + "#lockby:" + group, k.locks}
}

// LockGroup implements backend.GroupLocker with SET PX in a script; the
// lock's expiry is Redis's clock, the same for every member.
func (b *Backend) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (held, takeover bool, err error) {
	if b.isClosed() {
		return false, false, fmt.Errorf("redisstream: lock group %q of %q: %w", group, topic, backend.ErrClosed)
	}
	var r []int64
	err = b.call(ctx, func(ctx context.Context) error {
		var err error
		r, err = lockGroupScript.Run(ctx, b.client, b.lockKeys(topic, group), holder, max(ttl.Milliseconds(), 1), group).Int64Slice()
		return err
	})
	if err != nil {
		return false, false, fmt.Errorf("redisstream: lock group %q of %q: %w", group, topic, err)
	}
	if len(r) != 2 {
		return false, false, fmt.Errorf("redisstream: lock group %q of %q: unexpected reply %v", group, topic, r)
	}
	return r[0] == 1, r[1] == 1, nil
}

// UnlockGroup implements backend.GroupLocker.
func (b *Backend) UnlockGroup(ctx context.Context, topic, group, holder string) error {
	err := b.call(ctx, func(ctx context.Context) error {
		return unlockGroupScript.Run(ctx, b.client, b.lockKeys(topic, group), holder, group).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstream: unlock group %q of %q: %w", group, topic, err)
	}
	return nil
}

package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupLocker = (*Backend)(nil)

// lockKeys are the lock of group on topic and its last holder, in the
// topic's slot.
func (b *Backend) lockKeys(topic, group string) []string {
	s := newKeys(b.opts.Prefix, topic).stream
	return []string{s + "#lock:" + group, s + "#lockby:" + group}
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
		r, err = lockGroupScript.Run(ctx, b.client, b.lockKeys(topic, group), holder, max(ttl.Milliseconds(), 1)).Int64Slice()
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
		return unlockGroupScript.Run(ctx, b.client, b.lockKeys(topic, group), holder).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstream: unlock group %q of %q: %w", group, topic, err)
	}
	return nil
}

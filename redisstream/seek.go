package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupSeeker = (*Backend)(nil)

// SeekGroup implements backend.GroupSeeker with XGROUP SETID: the group's
// last-delivered ID moves to "0" (oldest), "$" (newest) or just before the
// first entry of the time's millisecond. Members may stay live: their next
// read starts there. Entries the group has pending stay pending and are
// redelivered after their lease unless they are acked first.
func (b *Backend) SeekGroup(ctx context.Context, topic, group string, to backend.SeekTarget) error {
	if b.isClosed() {
		return fmt.Errorf("redisstream: seek group %q of %q: %w", group, topic, backend.ErrClosed)
	}
	id := seekID(to)
	k := streamKey(b.opts.Prefix, topic)
	err := b.call(ctx, func(ctx context.Context) error {
		return b.client.XGroupSetID(ctx, k, group, id).Err()
	})
	if err != nil {
		if isNoGroup(err) || strings.Contains(err.Error(), "requires the key to exist") {
			err = fmt.Errorf("%w: %w", backend.ErrUnknownGroup, err)
		}
		return fmt.Errorf("redisstream: seek group %q of %q: %w", group, topic, err)
	}
	return nil
}

// seekID is the last-delivered ID that makes a group read from to on.
func seekID(to backend.SeekTarget) string {
	switch {
	case to.Oldest:
		return "0"
	case to.Newest:
		return "$"
	}
	ms := to.Time.UnixMilli()
	if ms <= 0 {
		return "0"
	}
	// The last possible ID of the millisecond before: the next read gets
	// the first entry of the time's millisecond or later.
	return strconv.FormatInt(ms-1, 10) + "-18446744073709551615"
}

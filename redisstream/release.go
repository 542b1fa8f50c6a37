package redisstream

import (
	"context"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var (
	_ backend.Releaser = (*subscription)(nil)
	_ backend.Snoozer  = (*subscription)(nil)
)

// Release gives the entry back to the group at once without counting the
// delivery: it stays in the group's pending list (so no crash can lose
// it), becomes claimable at once, and its delivery counter is set one
// lower (XCLAIM ... RETRYCOUNT), so the reclaim that hands it out again
// gives it this delivery's Attempt. A delivery whose count is unknown is
// nacked instead (and counts). A stale id changes nothing and returns an
// error wrapping backend.ErrStale.
func (s *subscription) Release(ctx context.Context, id backend.AckID) error {
	return s.Snooze(ctx, id, 0)
}

// Snooze gives the entry back to the group after delay without counting
// the delivery (backend.Snoozer), as Release does at once; a delay longer
// than the lease is held in the topic's hold ZSET like a nack's. A
// delivery whose count is unknown is nacked instead (and counts). Since
// the count is lowered, the pair (consumer, count) that names a delivery
// can repeat when this same member reclaims the entry; the bus never
// settles a delivery twice, so the repeat names only the new delivery.
func (s *subscription) Snooze(ctx context.Context, id backend.AckID, delay time.Duration) error {
	if e, ok := entryOf(id); ok && e.count <= 0 {
		return s.Nack(ctx, id, delay)
	}
	return s.giveBack(ctx, "snooze", id, delay, false)
}

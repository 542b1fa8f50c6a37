package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Releaser = (*subscription)(nil)

// Release gives the entry back to the group at once without counting the
// delivery: it stays in the group's pending list (so no crash can lose
// it), becomes claimable at once, and its delivery counter is set one
// lower (XCLAIM ... RETRYCOUNT), so the reclaim that hands it out again
// gives it this delivery's Attempt. A delivery whose count is unknown is
// nacked instead (and counts). A stale id changes nothing and returns an
// error wrapping backend.ErrStale. Since the count is lowered, the pair
// (consumer, count) that names a delivery would repeat if this same
// subscription reclaimed the entry; the bus releases only while it closes
// the subscription, which then receives nothing more.
func (s *subscription) Release(ctx context.Context, id backend.AckID) error {
	e, ok := entryOf(id)
	if !ok {
		return s.errf("release", fmt.Errorf("foreign ack id %T", id))
	}
	if e.count <= 0 {
		return s.Nack(ctx, id, 0)
	}
	idle := s.lease().Milliseconds() + 1 // claimable at once
	var r int64
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		r, err = releaseScript.Run(ctx, s.b.client, []string{s.keys.stream},
			s.cfg.Group, s.consumer, e.id, idle, e.count).Int64()
		return err
	})
	if err != nil {
		return s.errf("release", err)
	}
	if err := staleErr(e, r); err != nil {
		return s.errf("release", err)
	}
	s.rc.dueBy(time.Now())
	return nil
}

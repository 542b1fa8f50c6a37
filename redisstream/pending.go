package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.PendingLister = (*subscription)(nil)

// PendingDeliveries implements backend.PendingLister: the group's
// pending entries list (XPENDING, in entry ID order: log order), every
// entry read with XRANGE in one pipeline for its message ID and key. An
// entry's lease end is its idle time subtracted from the group's lease.
// A nacked entry stays in the list, so the list is exact; an entry
// trimmed from the stream while pending is left out (nothing of it can
// be delivered again).
func (s *subscription) PendingDeliveries(ctx context.Context, max int) ([]backend.Pending, bool, error) {
	if max < 1 {
		return nil, false, s.errf("pending deliveries", fmt.Errorf("%w: max %d", ErrInvalidOption, max))
	}
	if s.ended() {
		return nil, false, s.errf("pending deliveries", backend.ErrClosed)
	}
	var ps []redis.XPendingExt
	var out []backend.Pending
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		ps, err = s.b.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.keys.stream, Group: s.cfg.Group, Start: "-", End: "+", Count: int64(max) + 1}).Result()
		if err != nil || len(ps) == 0 {
			return err
		}
		pipe := s.b.client.Pipeline()
		cmds := make([]*redis.XMessageSliceCmd, min(len(ps), max))
		for i := range cmds {
			cmds[i] = pipe.XRange(ctx, s.keys.stream, ps[i].ID, ps[i].ID)
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return err
		}
		now := time.Now()
		lease := time.Duration(s.leaseMs.Load()) * time.Millisecond
		for i, c := range cmds {
			es, err := c.Result()
			if err != nil {
				return err
			}
			if len(es) == 0 {
				continue
			}
			var m backend.Message
			if decode(es[0].ID, es[0].Values, &m) != nil {
				continue // quarantined when it is read, never delivered
			}
			out = append(out, backend.Pending{ID: m.ID, Key: m.Key, LeaseEnd: now.Add(lease - ps[i].Idle)})
		}
		return nil
	})
	if err != nil {
		return nil, false, s.errf("pending deliveries", err)
	}
	return out, len(ps) <= max, nil
}

package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/observer"
)

// groupLoss is when the subscription last found its group gone, and the
// wait before it re-creates the group again, which grows while losses
// repeat. Receive's goroutine only.
type groupLoss struct {
	wait time.Duration
	last time.Time
}

// recoverGroup re-creates a consumer group that vanished (the server lost
// its data, or someone deleted the stream or group). It starts at the
// oldest entry, so nothing published after the loss is skipped, and
// reports the loss. Repeated losses back off up to 5s.
func (s *subscription) recoverGroup(ctx context.Context, cause error) error {
	now := time.Now()
	if now.Sub(s.lost.last) < 10*time.Second {
		s.lost.wait = min(max(2*s.lost.wait, 100*time.Millisecond), 5*time.Second)
	} else {
		s.lost.wait = 0
	}
	s.lost.last = now
	if s.lost.wait > 0 {
		t := time.NewTimer(s.lost.wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if err := s.b.call(ctx, func(ctx context.Context) error {
		if err := createGroup(ctx, s.b.client, s.keys.stream, s.cfg.Group, "0"); err != nil {
			return err
		}
		return createConsumer(ctx, s.b.client, s.keys.stream, s.cfg.Group, s.consumer)
	}); err != nil {
		return receiveErr(s.errf("recreate group", err))
	}
	s.b.stats.recreated.Add(1)
	s.handed = "" // the new group delivers from the oldest entry
	if s.recovering {
		s.setRecovering(true)
	}
	s.observe(observer.ScopeReclaim, "", 0, s.errf("receive", fmt.Errorf(
		"consumer group %q was missing (%v); re-created from the oldest retained entry: unsettled messages of the group may have been lost on the server", s.cfg.Group, cause)))
	return nil
}

// lease is the group's lease as this member knows it (see leaseMs).
func (s *subscription) lease() time.Duration {
	return max(time.Duration(s.leaseMs.Load())*time.Millisecond, s.cfg.AckTimeout)
}

// noteLease records the group's lease read from Redis; it only grows.
func (s *subscription) noteLease(ms int64) {
	for {
		cur := s.leaseMs.Load()
		if ms <= cur || s.leaseMs.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// joinLease records this member's ack timeout in the group's lease and
// learns the group's lease.
func (s *subscription) joinLease(ctx context.Context) error {
	return s.b.call(ctx, func(ctx context.Context) error {
		ms, err := groupLeaseScript.Run(ctx, s.b.client, []string{s.keys.lease}, s.cfg.Group, s.cfg.AckTimeout.Milliseconds()).Int64()
		if err == nil {
			s.noteLease(ms)
		}
		return err
	})
}

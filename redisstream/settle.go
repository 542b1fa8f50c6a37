package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
)

// Ack acks the entries with one XACK.
func (s *subscription) Ack(ctx context.Context, ids []backend.AckID) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, 0, len(s.ackHead)+len(ids))
	args = append(args, s.ackHead[:]...)
	for _, id := range ids {
		e, ok := entryOf(id)
		if !ok {
			return s.errf("ack", fmt.Errorf("foreign ack id %T", id))
		}
		args = append(args, &e.id) // a pointer boxes without an allocation
	}
	// XACK settles the entry whoever holds it now: an Ack of a delivery
	// whose lease ran out still settles a message that is unsettled, and
	// one already settled is a no-op.
	if err := s.b.call(ctx, func(ctx context.Context) error {
		return s.b.client.Do(ctx, args...).Err()
	}); err != nil {
		return s.errf("ack", err)
	}
	return nil
}

// Nack makes the entry claimable again after delay, atomically and
// without losing it: it stays in the group's pending list throughout. A
// stale id (the entry was settled, or delivered again since) changes
// nothing and returns an error wrapping backend.ErrStale.
func (s *subscription) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	return s.giveBack(ctx, "nack", id, delay, true)
}

// giveBack makes the entry claimable again after delay (nackScript),
// counting the delivery or not.
func (s *subscription) giveBack(ctx context.Context, op string, id backend.AckID, delay time.Duration, counted bool) error {
	e, ok := entryOf(id)
	if !ok {
		return s.errf(op, fmt.Errorf("foreign ack id %T", id))
	}
	uncount := "0"
	if !counted {
		uncount = "1"
	}
	at := s.lease()
	idle := at.Milliseconds() + 1 // claimable at once
	// claimable is how long after the script's reply the entry is
	// claimable at the latest.
	claimable := time.Duration(0)
	hold := int64(0)
	switch {
	case delay <= 0:
	case delay < at:
		// Claimable once the server's clock, which counts whole
		// milliseconds, has moved on by at-idle since the script ran:
		// the delay rounded up, and one more for the millisecond the
		// script started in, so that it is never early.
		idle = max(at.Milliseconds()-ceilMs(delay)-1, 0)
		claimable = at - time.Duration(idle)*time.Millisecond
	default:
		// Held: the script records the due time by the server's clock,
		// rounded up the same way; the promoter makes the entry
		// claimable then, and the reclaim never takes it before.
		idle = 0
		hold = ceilMs(delay)
		claimable = delay + 2*time.Millisecond
	}
	var r int64
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		r, err = nackScript.Run(ctx, s.b.client, []string{s.keys.stream, s.keys.hold, s.keys.held},
			s.cfg.Group, s.consumer, e.id, idle, hold, at.Milliseconds(), e.count, uncount).Int64()
		return err
	})
	if err != nil {
		return s.errf(op, err)
	}
	if err := staleErr(e, r); err != nil {
		return s.errf(op, err)
	}
	if hold != 0 {
		s.ts.wake()
	}
	s.rc.dueAt(time.Now().Add(claimable))
	return nil
}

// ceilMs returns d in milliseconds, rounded up.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// staleErr turns the reply of a settlement script into an error wrapping
// backend.ErrStale (0: no longer pending; -1: delivered again since).
func staleErr(e *entryRef, r int64) error {
	switch r {
	case 0:
		return fmt.Errorf("entry %s is no longer pending: %w", e.id, backend.ErrStale)
	case -1:
		return fmt.Errorf("entry %s was delivered again after delivery %d: %w", e.id, e.count, backend.ErrStale)
	}
	return nil
}

// Extend resets the entry's idle time without counting a delivery. A
// stale id returns an error wrapping backend.ErrStale.
func (s *subscription) Extend(ctx context.Context, id backend.AckID) error {
	e, ok := entryOf(id)
	if !ok {
		return s.errf("extend", fmt.Errorf("foreign ack id %T", id))
	}
	var r int64
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		r, err = extendScript.Run(ctx, s.b.client, []string{s.keys.stream}, s.cfg.Group, s.consumer, e.id, e.count).Int64()
		return err
	})
	if err != nil {
		return s.errf("extend", err)
	}
	if err := staleErr(e, r); err != nil {
		return s.errf("extend", err)
	}
	return nil
}

// DeadLetter adds msg to the dead-letter topic and acks the original in one
// Lua script. On a cluster, when the dead-letter topic lives in another
// slot, it adds the copy first and acks after, so a crash in between can
// leave a duplicate in the dead-letter topic but never lose the message.
// A stale id writes nothing and returns an error wrapping
// backend.ErrStale.
func (s *subscription) DeadLetter(ctx context.Context, id backend.AckID, topic string, msg *backend.Message) error {
	e, ok := entryOf(id)
	if !ok {
		return s.errf("dead-letter", fmt.Errorf("foreign ack id %T", id))
	}
	fields := appendFields(make([]any, 0, fieldCount(msg)), msg, appendMeta(nil, msg))
	var r int64
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		r, err = s.moveToDeadLetter(ctx, e, topic, fields)
		return err
	})
	if err != nil {
		return s.errf("dead-letter", err)
	}
	if err := staleErr(e, r); err != nil {
		return s.errf("dead-letter", err)
	}
	return nil
}

// moveToDeadLetter moves entry e to topic if this consumer still holds
// the same delivery of it. It returns 1 when moved, 0 when the entry is no
// longer pending and -1 when it was delivered again since.
func (s *subscription) moveToDeadLetter(ctx context.Context, e *entryRef, topic string, fields []any) (int64, error) {
	dlq := s.dlqKey
	atomicMove := s.dlqAtomic
	if topic != s.cfg.DeadLetterTopic {
		dlq = streamKey(s.b.opts.Prefix, topic)
		atomicMove = !s.b.cluster || slotOf(dlq) == slotOf(s.keys.stream)
	}
	maxLen := "0"
	if s.b.opts.MaxLen > 0 {
		maxLen = strconv.FormatInt(s.b.opts.MaxLen, 10)
	}
	if atomicMove {
		args := make([]any, 0, 5+len(fields))
		args = append(args, s.cfg.Group, e.id, maxLen, s.consumer, e.count)
		args = append(args, fields...)
		return deadLetterScript.Run(ctx, s.b.client, []string{s.keys.stream, dlq}, args...).Int64()
	}
	p, err := s.b.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.keys.stream, Group: s.cfg.Group, Start: e.id, End: e.id, Count: 1}).Result()
	if err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if p[0].Consumer != s.consumer || e.count != 0 && p[0].RetryCount != int64(e.count) {
		return -1, nil
	}
	a := &redis.XAddArgs{Stream: dlq, Values: fields}
	if maxLen != "0" {
		a.MaxLen, a.Approx = s.b.opts.MaxLen, true
	}
	if err := s.b.client.XAdd(ctx, a).Err(); err != nil {
		return 0, err
	}
	return 1, s.b.client.XAck(ctx, s.keys.stream, s.cfg.Group, e.id).Err()
}

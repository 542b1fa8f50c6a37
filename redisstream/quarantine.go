package redisstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/eventbus-go/bus/observer"
)

// quarantine dead-letters (when a dead-letter topic is set) and acks a
// malformed entry, and reports it. It never reaches the handler. It is
// bounded by the Receive ctx: an entry left pending when ctx ends is
// reclaimed and quarantined again after its lease.
func (s *subscription) quarantine(ctx context.Context, id string, values map[string]any, attempt int, cause error) {
	s.b.stats.malformed.Add(1)
	err := s.errf("decode", cause)
	if s.cfg.DeadLetterTopic == "" {
		if aerr := s.b.call(ctx, func(ctx context.Context) error {
			return s.b.client.XAck(ctx, s.keys.stream, s.cfg.Group, id).Err()
		}); aerr != nil {
			err = errors.Join(err, fmt.Errorf("ack: %w", aerr))
		} else {
			err = fmt.Errorf("%w (acked and dropped: dead-lettering is off)", err)
		}
		s.observe(observer.ScopeDecode, id, attempt, err)
		return
	}
	dl := malformedCopy(id, values, s.topic, s.cfg.Group, attempt, cause)
	fields := appendFields(nil, dl, appendMeta(nil, dl))
	var r int64
	derr := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		// Count 0: the entry was just handed to this consumer; only
		// its ownership is checked.
		r, err = s.moveToDeadLetter(ctx, &entryRef{id: id}, s.cfg.DeadLetterTopic, fields)
		return err
	})
	switch {
	case derr != nil:
		err = errors.Join(err, fmt.Errorf("dead-letter to %q: %w", s.cfg.DeadLetterTopic, derr))
	case r != 1:
		err = fmt.Errorf("%w (settled by another consumer meanwhile)", err)
	default:
		err = fmt.Errorf("%w (moved to %q)", err, s.cfg.DeadLetterTopic)
	}
	s.observe(observer.ScopeDecode, id, attempt, err)
}

// dropTrimmed acks entries that were deleted from the stream while pending
// (their values are gone) and reports them: they cannot be delivered.
func (s *subscription) dropTrimmed(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	err := fmt.Errorf("%d pending entries were trimmed or deleted from the stream before they were settled (first %s); they are lost and were acked", len(ids), ids[0])
	if aerr := s.b.call(ctx, func(ctx context.Context) error {
		return s.b.client.XAck(ctx, s.keys.stream, s.cfg.Group, ids...).Err()
	}); aerr != nil {
		err = errors.Join(err, fmt.Errorf("ack: %w", aerr))
	}
	// Reported before counted: whoever sees the count sees the event.
	s.observe(observer.ScopeReclaim, ids[0], 0, s.errf("reclaim", err))
	s.b.stats.trimmed.Add(int64(len(ids)))
}

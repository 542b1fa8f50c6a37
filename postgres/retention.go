package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/trimset"
)

// BoundRetention caps topic by age and length from now on: every
// TrimInterval the trimmer of this Backend deletes, oldest first, the
// messages published longer than bound.MaxAge ago and those past the
// newest bound.MaxLen, whether or not the topic has groups or
// subscribers; a message a group holds in a lease or a delivery row is
// kept until it is settled. Between passes a topic may exceed its length
// by what was published in one TrimInterval, and a pass deletes at most
// trimRounds × trimBatch messages of it. It implements
// backend.RetentionBounder and does no I/O.
func (b *Backend) BoundRetention(_ context.Context, topic string, bound backend.RetentionBound) error {
	if b.shut.Load() {
		return fmt.Errorf("postgres: bound retention of %q: %w", topic, backend.ErrClosed)
	}
	if bound.MaxLen < 0 || bound.MaxAge < 0 {
		return fmt.Errorf("postgres: bound retention of %q: %w: negative bound", topic, ErrInvalidOption)
	}
	b.published.SetBound(topic, bound)
	return nil
}

// TrimSettled deletes, within ctx, the messages of topic that every group
// settled (RetainSettled; RetainAll deletes nothing): the bus calls it
// when a subscription closes. It implements backend.SettledTrimmer.
func (b *Backend) TrimSettled(ctx context.Context, topic string) error {
	if b.opts.Retention != RetainSettled {
		return nil
	}
	if b.shut.Load() {
		return fmt.Errorf("postgres: trim %q: %w", topic, backend.ErrClosed)
	}
	from := trimPos{ord: "0"}
	for range trimRounds {
		next, n, err := b.trimOnce(ctx, topic, from)
		if err != nil {
			return fmt.Errorf("postgres: trim %q: %w", topic, classify(err))
		}
		if from = next; n < trimBatch {
			return nil
		}
	}
	return nil
}

// trimBound deletes what lies past tp's bound: the oldest messages while
// they are older than MaxAge, then the oldest past the newest MaxLen. The
// length is counted only when this Backend published to the topic since
// the last pass or over is set (the last pass left the topic over its
// length, or failed); it reports whether the topic may still be over its
// length, which it may be after any pass that saw a publish.
func (b *Backend) trimBound(ctx context.Context, tp trimset.Topic, over bool) bool {
	if tp.Bound.MaxAge > 0 {
		for range trimRounds {
			n, err := b.deleteHead(ctx, tp.Name, trimBatch, tp.Bound.MaxAge.Milliseconds())
			if err != nil || n < trimBatch {
				break
			}
		}
	}
	if tp.Bound.MaxLen <= 0 || !tp.Published && !over {
		return false
	}
	var count int64
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM bus_messages WHERE topic = $1`, tp.Name).Scan(&count); err != nil {
		return true
	}
	excess := count - tp.Bound.MaxLen
	for range trimRounds {
		if excess <= 0 {
			// A publish this pass saw may commit after the count: after
			// one, count again at the next pass.
			return tp.Published
		}
		n, err := b.deleteHead(ctx, tp.Name, min(excess, trimBatch), -1)
		if err != nil || n == 0 {
			// n == 0: what is left past the bound is held by a group.
			return err != nil
		}
		excess -= n
	}
	return excess > 0
}

// deleteHead deletes, in a transaction of its own, the first limit
// messages of topic in log order but those a group holds; with
// olderMS >= 0, only those published more than olderMS milliseconds ago.
// It returns how many it deleted.
func (b *Backend) deleteHead(ctx context.Context, topic string, limit, olderMS int64) (int64, error) {
	batch := &pgx.Batch{}
	batch.Queue(`SELECT ` + allowDelete)
	batch.Queue(deleteHeadSQL, topic, limit, olderMS)
	br := b.pool.SendBatch(ctx, batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return 0, err
	}
	tag, err := br.Exec()
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// deleteHeadSQL deletes, of the first $2 messages of topic $1 in log
// order, those published more than $3 ms ago (every one with $3 < 0) that
// no group of the topic holds (see trimDeleteSQL).
var deleteHeadSQL = `WITH g AS (SELECT id FROM bus_groups WHERE topic = $1),
h AS MATERIALIZED (SELECT ctid, seq, published_at FROM bus_messages WHERE topic = $1 ORDER BY ord, seq LIMIT $2),
r AS MATERIALIZED (SELECT ctid, seq FROM h WHERE $3::bigint < 0 OR published_at < clock_timestamp() - $3::bigint * interval '1 millisecond'),
held AS (SELECT d.seq FROM bus_deliveries d WHERE d.group_id = ANY(ARRAY(SELECT id FROM g))
    AND d.seq BETWEEN (SELECT min(seq) FROM r) AND (SELECT max(seq) FROM r)
    UNION ALL
    SELECT p FROM bus_leases l CROSS JOIN LATERAL unnest(l.pending) AS p WHERE l.group_id = ANY(ARRAY(SELECT id FROM g))
    AND p BETWEEN (SELECT min(seq) FROM r) AND (SELECT max(seq) FROM r))
DELETE FROM bus_messages m
WHERE m.ctid = ANY(ARRAY(SELECT ctid FROM r WHERE seq NOT IN (SELECT seq FROM held)))`

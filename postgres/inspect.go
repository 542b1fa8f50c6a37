package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus/backend"
)

var (
	_ backend.Inspector    = (*Backend)(nil)
	_ backend.TopicDeleter = (*Backend)(nil)
	_ backend.GroupSeeker  = (*Backend)(nil)
)

// Topics implements backend.Inspector: the topics of bus_topics with the
// count, size and publish times of their retained messages and of those
// held until their DeliverAt. Published is Unknown: the log's seq is one
// sequence for every topic, and no count per topic is kept.
func (b *Backend) Topics(ctx context.Context) ([]backend.TopicInfo, error) {
	rows, err := b.pool.Query(ctx, `SELECT t.name, s.n, s.bytes, s.oldest, s.newest, s.scheduled, s.next_due
FROM bus_topics t CROSS JOIN LATERAL (
    SELECT count(*) AS n, coalesce(sum(octet_length(payload) + octet_length(id) + octet_length(key) + coalesce(octet_length(headers), 0)), 0)::bigint AS bytes,
        min(published_at) AS oldest, max(published_at) AS newest,
        count(*) FILTER (WHERE visible_at > clock_timestamp()) AS scheduled,
        min(visible_at) FILTER (WHERE visible_at > clock_timestamp()) AS next_due
    FROM bus_messages m WHERE m.topic = t.name) s
ORDER BY t.name COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("postgres: topics: %w", classify(err))
	}
	out := []backend.TopicInfo{}
	for rows.Next() {
		ti := backend.TopicInfo{Published: backend.Unknown}
		var n, bytes, sched int64
		var oldest, newest, next *time.Time
		if err := rows.Scan(&ti.Name, &n, &bytes, &oldest, &newest, &sched, &next); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: topics: %w", err)
		}
		ti.Messages, ti.Bytes, ti.Scheduled = backend.Figure(n), backend.Figure(bytes), backend.Figure(sched)
		if oldest != nil {
			ti.Oldest, ti.Newest = *oldest, *newest
		}
		if next != nil {
			ti.NextDue = *next
		}
		out = append(out, ti)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: topics: %w", err)
	}
	return out, nil
}

// Groups implements backend.Inspector. Pending counts the deliveries
// received and not settled (leased, given back or with a lease that ran
// out: delivery rows with n > 0 and the seqs pending in leases), Lag those never delivered (the messages after the group's cursor
// and the first deliveries waiting for their DeliverAt); Consumers counts
// the live subscriptions (fillConsumers). OldestPending is left zero
// (unknown): a row keeps when its lease ends, not when it began.
func (b *Backend) Groups(ctx context.Context, topic string) ([]backend.GroupInfo, error) {
	rows, err := b.pool.Query(ctx, `SELECT g.name,
    (SELECT count(*) FROM bus_deliveries d WHERE d.group_id = g.id AND d.n > 0)
    + (SELECT coalesce(sum(cardinality(l.pending)), 0) FROM bus_leases l WHERE l.group_id = g.id),
    (SELECT count(*) FROM bus_deliveries d WHERE d.group_id = g.id AND d.n = 0)
    + (SELECT count(*) FROM bus_messages m WHERE m.topic = g.topic AND (m.ord, m.seq) > (g.cur_ord, g.cur_seq))
FROM bus_groups g WHERE g.topic = $1 ORDER BY g.name COLLATE "C"`, topic)
	if err != nil {
		return nil, fmt.Errorf("postgres: groups of %q: %w", topic, classify(err))
	}
	out := []backend.GroupInfo{}
	for rows.Next() {
		gi := backend.GroupInfo{Consumers: backend.Unknown}
		var pending, lag int64
		if err := rows.Scan(&gi.Name, &pending, &lag); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: groups of %q: %w", topic, err)
		}
		gi.Pending, gi.Lag = backend.Figure(pending), backend.Figure(lag)
		out = append(out, gi)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: groups of %q: %w", topic, err)
	}
	if err := b.fillConsumers(ctx, topic, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Peek implements backend.Inspector: the messages in the order groups
// read them, (ord, seq); the cursor is the next message's "ord.seq".
func (b *Backend) Peek(ctx context.Context, topic, cursor string, n int) ([]*backend.Message, string, error) {
	var ord uint64
	var from int64
	if cursor != "" {
		o, q, ok := strings.Cut(cursor, ".")
		var err1, err2 error
		ord, err1 = strconv.ParseUint(o, 10, 63)
		from, err2 = strconv.ParseInt(q, 10, 64)
		if !ok || err1 != nil || err2 != nil || from < 0 {
			return nil, "", fmt.Errorf("postgres: peek %q: %w: bad cursor", topic, ErrInvalidOption)
		}
	}
	if n <= 0 {
		return nil, "", nil
	}
	rows, err := b.pool.Query(ctx, `SELECT ord::text, seq, id, key, headers, payload, published_at FROM bus_messages
WHERE topic = $1 AND (ord, seq) >= ($2::text::xid8, $3) ORDER BY ord, seq LIMIT $4`, topic, strconv.FormatUint(ord, 10), from, n+1)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: peek %q: %w", topic, classify(err))
	}
	defer rows.Close()
	var out []*backend.Message
	next := ""
	for rows.Next() {
		var seq int64
		var o string
		var m backend.Message
		var key, headers []byte
		if err := rows.Scan(&o, &seq, &m.ID, &key, &headers, &m.Payload, &m.PublishedAt); err != nil {
			return nil, "", fmt.Errorf("postgres: peek %q: %w", topic, err)
		}
		if len(out) == n {
			next = o + "." + strconv.FormatInt(seq, 10)
			break
		}
		m.Key = string(key)
		if m.Headers, err = decodeHeaders(headers); err != nil {
			m.Headers = nil
		}
		out = append(out, &m)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("postgres: peek %q: %w", topic, err)
	}
	return out, next, nil
}

// Delete implements backend.Inspector: the messages, every group's
// delivery rows of them and their seqs pending in the groups' leases go
// in one statement, in a transaction that allows deletes (allowDelete).
func (b *Backend) Delete(ctx context.Context, topic string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	return b.deleteWhere(ctx, topic, "id", ids)
}

// DeleteCopies removes the messages of topic that equal one of msgs in ID
// and headers (backend.CopyDeleter): it reads the rows of their IDs and
// deletes those that match by seq, as Delete does.
func (b *Backend) DeleteCopies(ctx context.Context, topic string, msgs []*backend.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	rows, err := b.pool.Query(ctx, `SELECT seq, id, headers FROM bus_messages WHERE topic = $1 AND id = ANY($2)`, topic, ids)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete from %q: %w", topic, classify(err))
	}
	same := backend.SameCopy(msgs)
	var seqs []int64
	for rows.Next() {
		var seq int64
		var m backend.Message
		var headers []byte
		if err := rows.Scan(&seq, &m.ID, &headers); err != nil {
			rows.Close()
			return 0, fmt.Errorf("postgres: delete from %q: %w", topic, err)
		}
		if m.Headers, err = decodeHeaders(headers); err == nil && same(&m) {
			seqs = append(seqs, seq)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("postgres: delete from %q: %w", topic, classify(err))
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	return b.deleteWhere(ctx, topic, "seq", seqs)
}

// deleteWhere deletes the messages of topic whose column col is one of
// vals, with their deliveries and pending lease entries, in one statement.
func (b *Backend) deleteWhere(ctx context.Context, topic, col string, vals any) (int, error) {
	var n int
	batch := &pgx.Batch{}
	batch.Queue(`SELECT ` + allowDelete)
	batch.Queue(`WITH m AS (DELETE FROM bus_messages WHERE topic = $1 AND `+col+` = ANY($2) RETURNING seq),
d AS (DELETE FROM bus_deliveries WHERE group_id IN (SELECT id FROM bus_groups WHERE topic = $1) AND seq IN (SELECT seq FROM m)),
l AS (UPDATE bus_leases SET pending = ARRAY(SELECT p FROM unnest(pending) AS p WHERE p NOT IN (SELECT seq FROM m))
    WHERE group_id IN (SELECT id FROM bus_groups WHERE topic = $1) AND pending && ARRAY(SELECT seq FROM m))
SELECT count(*) FROM m`, topic, vals)
	br := b.pool.SendBatch(ctx, batch)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&n)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: delete from %q: %w", topic, classify(err))
	}
	return n, nil
}

// DeleteTopic implements backend.TopicDeleter: the topic's messages,
// groups with their delivery rows, locks, members and dedup records go in
// one transaction. A subscription still live on the topic receives
// nothing more (its group is gone) until it subscribes again.
func (b *Backend) DeleteTopic(ctx context.Context, topic string) error {
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2), `+allowDelete, lockTopic, topicLock(topic)); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM bus_deliveries WHERE group_id IN (SELECT id FROM bus_groups WHERE topic = $1)`,
			`DELETE FROM bus_leases WHERE group_id IN (SELECT id FROM bus_groups WHERE topic = $1)`,
			`DELETE FROM bus_groups WHERE topic = $1`,
			`DELETE FROM bus_messages WHERE topic = $1`,
			`DELETE FROM bus_dedup WHERE topic = $1`,
			`DELETE FROM bus_keyord WHERE topic = $1`,
			`DELETE FROM bus_locks WHERE topic = $1`,
			`DELETE FROM bus_members WHERE topic = $1`,
			`DELETE FROM bus_topics WHERE name = $1`,
		} {
			if _, err := tx.Exec(ctx, q, topic); err != nil {
				return err
			}
		}
		return nil
	})
	b.notes.forget(topic)
	if err != nil {
		return fmt.Errorf("postgres: delete topic %q: %w", topic, classify(err))
	}
	return nil
}

// SeekGroup implements backend.GroupSeeker: in one transaction, under
// the topic's exclusive lock, it drops the group's delivery rows and
// leases
// (deliveries in flight are dropped: their settlements find nothing, and
// a Nack or Extend of them is stale) and moves the cursor: before every
// message for the oldest, after every message for the newest (as a new
// group starting there). For a time it starts the cursor after every
// message and writes a waiting delivery row for each retained message
// published at or after the time.
func (b *Backend) SeekGroup(ctx context.Context, topic, group string, to backend.SeekTarget) error {
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, lockTopic, topicLock(topic)); err != nil {
			return err
		}
		var gid int64
		err := tx.QueryRow(ctx, `SELECT id FROM bus_groups WHERE topic = $1 AND name = $2`, topic, group).Scan(&gid)
		if errors.Is(err, pgx.ErrNoRows) {
			return backend.ErrUnknownGroup
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM bus_deliveries WHERE group_id = $1`, gid); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM bus_leases WHERE group_id = $1`, gid); err != nil {
			return err
		}
		if to.Oldest {
			_, err = tx.Exec(ctx, `UPDATE bus_groups SET cur_ord = '0', cur_seq = 0 WHERE id = $1`, gid)
			return err
		}
		if _, err := tx.Exec(ctx, startSQL, topic, gid); err != nil || to.Newest {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO bus_deliveries (group_id, seq, ord, visible_at)
SELECT $1, seq, ord, visible_at FROM bus_messages WHERE topic = $2 AND published_at >= $3`, gid, topic, to.Time)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: seek group %q of %q: %w", group, topic, classify(err))
	}
	return nil
}

package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgcheck"
	"github.com/eventbus-go/bus/internal/msgid"
)

// maxRowsPerInsert keeps one INSERT of PublishTx under PostgreSQL's 65535
// parameters (7 per row).
const maxRowsPerInsert = 4000

// PublishTx writes msgs to topic in tx, the caller's transaction:
// subscribers receive them once tx commits, and never if it rolls back.
// It validates like bus.Publish (before any I/O, with the same errors: a
// *bus.PublishError with Rejected set lists the invalid messages, and
// nothing is written) against bus.DefaultMaxPayload, and assigns the same
// time-ordered IDs to messages without one. A caller-set ID already
// published to the topic within the default dedup window (two minutes)
// is not stored again. A partitioned topic's messages go to their
// partitions, as bus.Publish sends them.
//
// Keyed messages take a transaction lock on their key's hash, held until
// tx ends: a second transaction publishing the same key waits for the
// first to end, so the group receives a key's messages in the order
// their transactions committed. Call PublishTx late in the transaction,
// once (its locks are taken in one fixed order within a call), so that it
// does not deadlock with the application's own locks. The topic's shared
// lock is held until tx ends too: a new consumer group of the topic waits
// for it. In a REPEATABLE READ or SERIALIZABLE transaction the messages go
// to the groups that existed when the transaction took its snapshot, and
// a key that another transaction published after the snapshot fails the
// call with a serialization error (retry the transaction). Subscribers
// receive nothing written after tx began writing until tx ends (see the
// package doc, Commit order): keep tx short.
//
// Notifications go to the default channel ("bus"); backends opened with
// another channel find the messages by their poll.
func PublishTx(ctx context.Context, tx pgx.Tx, topic string, msgs ...*bus.Message) error {
	if tx == nil {
		return fmt.Errorf("postgres: publish %q: %w: nil transaction", topic, bus.ErrInvalidOption)
	}
	return publishTx(ctx, pgxTx{tx}, topic, msgs)
}

// SQLTx is what PublishSQL needs of a database/sql transaction (*sql.Tx
// implements it, with any PostgreSQL driver).
type SQLTx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// PublishSQL is PublishTx for a database/sql transaction.
func PublishSQL(ctx context.Context, tx SQLTx, topic string, msgs ...*bus.Message) error {
	if tx == nil {
		return fmt.Errorf("postgres: publish %q: %w: nil transaction", topic, bus.ErrInvalidOption)
	}
	return publishTx(ctx, sqlTx{tx}, topic, msgs)
}

// txRunner is the caller's transaction, through pgx or database/sql.
type txRunner interface {
	exec(ctx context.Context, sql string, args ...any) error
	// scan runs a query that returns one row and scans it into dst.
	scan(ctx context.Context, dst any, sql string, args ...any) error
}

const partitionsSQL = `SELECT coalesce((SELECT partitions FROM bus_topics WHERE name = $1), 0)`

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.Exec(ctx, sql, args...)
	return err
}

func (t pgxTx) scan(ctx context.Context, dst any, sql string, args ...any) error {
	return t.tx.QueryRow(ctx, sql, args...).Scan(dst)
}

type sqlTx struct{ tx SQLTx }

func (t sqlTx) exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, sql, args...)
	return err
}

func (t sqlTx) scan(ctx context.Context, dst any, sql string, args ...any) error {
	return t.tx.QueryRowContext(ctx, sql, args...).Scan(dst)
}

func publishTx(ctx context.Context, tx txRunner, topic string, msgs []*bus.Message) error {
	ms, err := validate(topic, msgs)
	if err != nil || len(ms) == 0 {
		return err
	}
	var n int
	if err := tx.scan(ctx, &n, partitionsSQL, topic); err != nil {
		return fmt.Errorf("postgres: publish %q: %w", topic, classify(err))
	}
	if n <= 1 {
		return insertTx(ctx, tx, topic, ms)
	}
	parts := make([][]*backend.Message, n)
	for _, m := range ms {
		p := backend.PartitionOf(m.Key, m.ID, n)
		parts[p] = append(parts[p], m)
	}
	for p, pm := range parts {
		if len(pm) == 0 {
			continue
		}
		if err := insertTx(ctx, tx, backend.PartitionTopic(topic, p), pm); err != nil {
			return err
		}
	}
	return nil
}

// validate assigns missing IDs and checks topic and msgs as bus.Publish
// does; it returns the messages as the SPI carries them.
func validate(topic string, msgs []*bus.Message) ([]*backend.Message, error) {
	if err := bus.ValidateTopic(topic); err != nil {
		return nil, fmt.Errorf("postgres: publish: %w", err)
	}
	missing := 0
	for _, m := range msgs {
		if m != nil && m.ID == "" {
			missing++
		}
	}
	ids := msgid.Batch(missing)
	now := time.Now()
	out := make([]*backend.Message, 0, len(msgs))
	var failed []bus.Failure
	for i, m := range msgs {
		if m == nil {
			failed = append(failed, bus.Failure{Index: i, Err: fmt.Errorf("%w: nil message", bus.ErrInvalidMessage)})
			continue
		}
		generated := false
		if m.ID == "" {
			m.ID, ids, generated = ids[:36], ids[36:], true
		}
		err := msgcheck.Check(msgcheck.Fields{
			ID: m.ID, Key: m.Key, Headers: m.Headers, PayloadLen: len(m.Payload),
			MaxPayload: bus.DefaultMaxPayload, PayloadLimit: "bus.DefaultMaxPayload, the limit of PublishTx", DeliverAt: m.DeliverAt, ExpiresAt: m.ExpiresAt,
		})
		if err != nil {
			failed = append(failed, bus.Failure{Index: i, ID: m.ID, Err: err})
			continue
		}
		out = append(out, &backend.Message{
			ID: m.ID, Key: m.Key, Headers: backend.WithTimes(m.Headers, m.DeliverAt, m.ExpiresAt, now), Payload: m.Payload,
			PublishedAt: now, IDGenerated: generated,
		})
	}
	if failed != nil {
		return nil, &bus.PublishError{Topic: topic, Failed: failed, Rejected: true}
	}
	return out, nil
}

// insertTx takes topic's shared lock and the locks of the batch's keys
// (ascending, so two calls never wait on each other in a cycle), then
// writes the batch: every seq is drawn after the locks are held, and a
// batch with keys gets an ord of at least the last one its keys got
// (keyOrdSQL), so a group reads a key's messages in the order their
// transactions committed.
func insertTx(ctx context.Context, tx txRunner, topic string, msgs []*backend.Message) error {
	var locks []int32
	for _, m := range msgs {
		if m.Key != "" {
			locks = append(locks, topicLock(m.Key))
		}
	}
	slices.Sort(locks)
	locks = slices.Compact(locks)
	var q, keys strings.Builder
	q.WriteString("SELECT pg_advisory_xact_lock_shared(" + strconv.Itoa(lockTopic) + ", $1)")
	if len(locks) > 0 {
		for i, l := range locks {
			if i > 0 {
				keys.WriteString(", ")
			}
			keys.WriteString("(" + strconv.Itoa(int(l)) + ")")
		}
		q.WriteString(", (SELECT count(pg_advisory_xact_lock(" + strconv.Itoa(lockKeys) + ", k)) FROM (SELECT k FROM (VALUES " +
			keys.String() + ") AS l(k) ORDER BY k) s)")
	}
	if err := tx.exec(ctx, q.String(), topicLock(topic)); err != nil {
		return fmt.Errorf("postgres: publish %q: %w", topic, classify(err))
	}
	ord := "0"
	if len(locks) > 0 {
		if err := tx.scan(ctx, &ord, keyOrdSQL(keys.String()), topic); err != nil {
			return fmt.Errorf("postgres: publish %q: %w", topic, classify(err))
		}
	}
	p := publisher{channel: defaultChannel, dedup: defaultDedupWindow}
	for start := 0; start < len(msgs); start += maxRowsPerInsert {
		r := p.rowsOf(msgs[start:min(start+maxRowsPerInsert, len(msgs))], false)
		query, args := valuesInsert(topic, r, p, ord)
		if err := tx.exec(ctx, query, args...); err != nil {
			return fmt.Errorf("postgres: publish %q: %w", topic, classify(err))
		}
	}
	return nil
}

// keyOrdSQL returns the ord of a batch of topic $1 with the key hashes
// keys (VALUES rows): the transaction's id, raised to the topic's floor
// and to the last ord any of the keys got, which it records for every
// key. It runs once the keys' locks are held: under READ COMMITTED it
// sees what the key's previous transaction recorded; under REPEATABLE
// READ or SERIALIZABLE a record written after the snapshot fails the
// upsert with a serialization error rather than being missed.
func keyOrdSQL(keys string) string {
	return `WITH k AS (SELECT k FROM (VALUES ` + keys + `) AS l(k)),
p AS (SELECT greatest(pg_current_xact_id(),
        coalesce((SELECT floor FROM bus_topics WHERE name = $1), '0'::xid8),
        coalesce((SELECT max(o.ord) FROM bus_keyord o WHERE o.topic = $1 AND o.k IN (SELECT k FROM k)), '0'::xid8)) AS v),
u AS (INSERT INTO bus_keyord (topic, k, ord) SELECT $1, k, (SELECT v FROM p) FROM k
        ON CONFLICT (topic, k) DO UPDATE SET ord = excluded.ord)
SELECT v::text FROM p`
}

// valuesInsert is insertSQL with the batch as VALUES of scalar
// parameters, which every database/sql driver passes.
func valuesInsert(topic string, r rows, p publisher, ord string) (string, []any) {
	args := make([]any, 1, 4+7*len(r.ids))
	args[0] = topic
	var x strings.Builder
	x.WriteString("SELECT * FROM (VALUES ")
	for i := range r.ids {
		if i > 0 {
			x.WriteString(", ")
		}
		n := len(args)
		var due, dkey any
		if r.due[i] != nil {
			due = *r.due[i]
		}
		if r.dkeys[i] != nil {
			dkey = *r.dkeys[i]
		}
		var headers any
		if r.headers[i] != nil {
			headers = r.headers[i]
		}
		args = append(args, r.ids[i], r.keys[i], headers, r.payloads[i], r.at[i], due, dkey)
		fmt.Fprintf(&x, "($%d::text, $%d::bytea, $%d::bytea, $%d::bytea, $%d::timestamptz, $%d::timestamptz, $%d::text, %d)",
			n+1, n+2, n+3, n+4, n+5, n+6, n+7, i+1)
	}
	x.WriteString(") AS x(id, key, headers, payload, published_at, due, dkey, ord)")
	args = append(args, p.dedup.Milliseconds(), p.channel, ord)
	return insertSQL("", x.String(), len(args)-2, len(args)-1, len(args), 0), args
}

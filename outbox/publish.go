package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/msgcheck"
	"github.com/eventbus-go/bus/internal/msgid"
	"github.com/eventbus-go/bus/internal/pgexec"
	"github.com/jackc/pgx/v5/pgconn"
)

// Partitions is the number of relay partitions. A message's partition is
// the hash of its key (of its ID when it has no key) modulo Partitions;
// one relay at a time publishes a partition.
const Partitions = 16

// Advisory lock namespaces (the first of the two int4 keys), so that the
// outbox's locks never meet an application's: "bus\x01" .. "bus\x03".
const (
	lockKeys      = 1651864321 // transaction locks on a key's hash, taken by Publish
	lockPartition = 1651864322 // session locks on a partition, held by its relay
	lockMembers   = 1651864323 // objid 0: shared by every relay (counted to share the partitions)
)

// maxRowsPerInsert keeps one INSERT under PostgreSQL's 65535 parameters
// (8 per row, plus one per distinct key).
const maxRowsPerInsert = 4000

// Execer runs a statement. pgx.Tx, *pgx.Conn and *pgxpool.Pool implement
// it; SQL adapts a database/sql transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SQLExecer is what SQL needs of a database/sql handle: *sql.Tx (and
// *sql.DB, *sql.Conn) implement it, with any PostgreSQL driver.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SQL adapts a database/sql transaction for Publish, Migrate and Requeue.
func SQL(tx SQLExecer) Execer { return pgexec.SQL(tx) }

// Publish writes msgs for topic into the outbox table in tx, the caller's
// transaction: the relay publishes them once tx commits, and never if it
// rolls back. It validates like bus.Publish (before any I/O, with the
// same errors: a *bus.PublishError with Rejected set lists invalid
// messages, and nothing is written) against the default payload limit
// bus.DefaultMaxPayload, and assigns the same time-ordered IDs to
// messages without one, so the ID the broker deduplicates on is fixed at
// commit.
//
// Keyed messages take a transaction lock on their key's hash, held until
// tx ends: two transactions writing the same key are ordered by their
// commits, and the relay publishes a key in that order. Call Publish once
// per transaction, late (the locks are taken in one fixed order within
// a call), so that it does not deadlock with the application's own locks.
func Publish(ctx context.Context, tx Execer, topic string, msgs ...*bus.Message) error {
	if tx == nil {
		return fmt.Errorf("outbox: publish %q: %w: nil transaction", topic, bus.ErrInvalidOption)
	}
	if err := validate(topic, msgs); err != nil {
		return err
	}
	for start := 0; start < len(msgs); start += maxRowsPerInsert {
		chunk := msgs[start:min(start+maxRowsPerInsert, len(msgs))]
		query, args, err := insert(topic, chunk)
		if err != nil {
			return fmt.Errorf("outbox: publish %q: %w", topic, err)
		}
		if _, err := tx.Exec(ctx, query, args...); err != nil {
			return fmt.Errorf("outbox: publish %q: %w", topic, err)
		}
	}
	return nil
}

// validate assigns missing IDs and checks topic and msgs as bus.Publish
// does.
func validate(topic string, msgs []*bus.Message) error {
	if err := bus.ValidateTopic(topic); err != nil {
		return fmt.Errorf("outbox: publish: %w", err)
	}
	missing := 0
	for _, m := range msgs {
		if m != nil && m.ID == "" {
			missing++
		}
	}
	ids := msgid.Batch(missing)
	var failed []bus.Failure
	for i, m := range msgs {
		if m == nil {
			failed = append(failed, bus.Failure{Index: i, Err: fmt.Errorf("%w: nil message", bus.ErrInvalidMessage)})
			continue
		}
		if m.ID == "" {
			m.ID, ids = ids[:36], ids[36:]
		}
		err := msgcheck.Check(msgcheck.Fields{
			ID: m.ID, Key: m.Key, Headers: m.Headers, PayloadLen: len(m.Payload),
			MaxPayload: bus.DefaultMaxPayload, PayloadLimit: "bus.DefaultMaxPayload, the limit of the outbox", DeliverAt: m.DeliverAt, ExpiresAt: m.ExpiresAt,
		})
		if err != nil {
			failed = append(failed, bus.Failure{Index: i, ID: m.ID, Err: err})
		}
	}
	if failed != nil {
		return &bus.PublishError{Topic: topic, Failed: failed, Rejected: true}
	}
	return nil
}

// insert builds one INSERT of msgs: topic is $1, each row has its
// parameters, and absent headers and times are NULL literals. Without
// keys it is a plain INSERT ... VALUES (rows draw seq in the order given).
// With keys, the rows are joined to an aggregate that first takes the
// keys' locks, in ascending order, so that every seq is drawn after the
// locks are held.
func insert(topic string, msgs []*bus.Message) (string, []any, error) {
	args := make([]any, 1, 1+7*len(msgs))
	args[0] = topic
	var locks []int32
	for _, m := range msgs {
		if m.Key != "" {
			locks = append(locks, keyLock(m.Key))
		}
	}
	keyed := len(locks) > 0
	var q strings.Builder
	if keyed {
		q.WriteString("INSERT INTO bus_outbox (topic, part, id, key, headers, payload, deliver_at, expires_at) SELECT v.topic, v.part, v.id, v.key, v.headers, v.payload, v.deliver_at, v.expires_at FROM (VALUES ")
	} else {
		q.WriteString("INSERT INTO bus_outbox (topic, part, id, key, headers, payload, deliver_at, expires_at) VALUES ")
	}
	for i, m := range msgs {
		headers, err := encodeHeaders(m.Headers)
		if err != nil {
			return "", nil, err
		}
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("($1::text")
		args = param(&q, args, int16(partition(m)), "smallint")
		args = param(&q, args, m.ID, "text")
		args = param(&q, args, []byte(m.Key), "bytea")
		args = param(&q, args, bytesArg(headers), "bytea")
		args = param(&q, args, payloadArg(m.Payload), "bytea")
		args = param(&q, args, timeArg(m.DeliverAt), "timestamptz")
		args = param(&q, args, timeArg(m.ExpiresAt), "timestamptz")
		if keyed {
			q.WriteString(", " + strconv.Itoa(i))
		}
		q.WriteString(")")
	}
	if keyed {
		q.WriteString(") AS v(topic, part, id, key, headers, payload, deliver_at, expires_at, ord)")
		slices.Sort(locks)
		locks = slices.Compact(locks)
		q.WriteString(" CROSS JOIN (SELECT count(pg_advisory_xact_lock(" + strconv.Itoa(lockKeys) + ", l.k)) FROM (VALUES ")
		for i, l := range locks {
			if i > 0 {
				q.WriteString(", ")
			}
			args = append(args, l)
			q.WriteString("($" + strconv.Itoa(len(args)) + "::int)")
		}
		q.WriteString(") AS l(k)) AS locked ORDER BY v.ord")
	}
	return q.String(), args, nil
}

// param writes ", $n::typ" for v (", NULL::typ" for a nil v) and returns
// args with v appended.
func param(q *strings.Builder, args []any, v any, typ string) []any {
	if v == nil {
		q.WriteString(", NULL::" + typ)
		return args
	}
	args = append(args, v)
	q.WriteString(", $" + strconv.Itoa(len(args)) + "::" + typ)
	return args
}

// partition is the relay partition of m.
func partition(m *bus.Message) int {
	s := m.Key
	if s == "" {
		s = m.ID
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return int(h.Sum32() % Partitions)
}

// keyLock is the lock key of a message key (its 32-bit FNV-1a hash; two
// keys that share it are merely ordered together).
func keyLock(key string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int32(h.Sum32())
}

// encodeHeaders stores headers as a JSON object (nil when there are none).
func encodeHeaders(h map[string]string) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	return json.Marshal(h)
}

// payloadArg makes a nil payload an empty one (the column is NOT NULL).
func payloadArg(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}

// bytesArg is a NULL for nil.
func bytesArg(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// timeArg is a NULL for the zero time.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

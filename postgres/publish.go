package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/eventbus-go/bus/backend"
)

// publisher builds the statements that write messages.
type publisher struct {
	channel string
	dedup   time.Duration
}

// insertSQL writes a batch of messages to topic $1 from the source x
// (columns id, key, headers, payload, published_at, due, dkey, ord) and
// notifies the channel $chanP (empty: none) when the topic has a group.
// Each message's ord is the writing transaction's id, raised to the
// topic's floor and, when ordP is not 0, to the xid8 $ordP. When lockP
// is not 0 the statement first takes the shared lock of the topic whose
// hash is $lockP (lockTopicSQL), and assigns the transaction's id and
// writes only after it holds it: every write reads a row of l (see
// Publish for why that is enough). A message
// with a dedup key is written only when the key is not in bus_dedup within
// the window ($dedupP ms) and is recorded there; with dedupP 0 the
// statement has no dedup step, and x no dkey column. guard, when not
// empty, is a list of CTEs, the last named "guard", that must return a
// row for anything to be written (dead-lettering settles the original in
// them). It returns the count of
// messages written, whether it notified, and whether a notification was
// due (a message was written to a topic with a group). Without dedup
// step and guard every message of x is written (x has as many rows as
// the array $2): the insert returns nothing, and the count is $2's.
func insertSQL(guard, x string, dedupP, chanP, ordP, lockP int) string {
	with := "WITH "
	cond := ""
	if guard != "" {
		with = "WITH " + guard + ", "
		cond = " AND EXISTS (SELECT 1 FROM guard)"
	}
	fromL := ""
	if lockP != 0 {
		with += "l AS MATERIALIZED (SELECT pg_advisory_xact_lock_shared(" + strconv.Itoa(lockTopic) + ", $" + strconv.Itoa(lockP) + "::integer)),\n"
		x = "SELECT s.* FROM l, (" + x + ") s"
		fromL = " FROM l"
	}
	channel := "$" + strconv.Itoa(chanP)
	d, keep := "", ""
	if dedupP != 0 {
		d = `d AS (INSERT INTO bus_dedup (topic, dkey, at) SELECT $1, x.dkey, clock_timestamp() FROM x WHERE x.dkey IS NOT NULL` + cond + `
        ON CONFLICT (topic, dkey) DO UPDATE SET at = excluded.at
        WHERE bus_dedup.at < excluded.at - $` + strconv.Itoa(dedupP) + `::bigint * interval '1 millisecond'
        RETURNING dkey),
`
		keep = "(x.dkey IS NULL OR x.dkey IN (SELECT dkey FROM d))"
	} else {
		keep = "true"
	}
	returning, written := "\n        RETURNING 1", "(SELECT count(*) FROM m)"
	if dedupP == 0 && guard == "" {
		returning, written = "", "cardinality($2::text[])::bigint"
	}
	ord := `greatest(pg_current_xact_id(), coalesce((SELECT floor FROM f), '0'::xid8)`
	if ordP != 0 {
		ord += ", $" + strconv.Itoa(ordP) + "::text::xid8"
	}
	ord += ") AS v" + fromL
	return with + `f AS (SELECT floor FROM bus_topics WHERE name = $1),
t AS (INSERT INTO bus_topics (name) SELECT $1` + fromL + ` WHERE NOT EXISTS (SELECT 1 FROM f)` +
		andGuard(guard) + ` ON CONFLICT DO NOTHING),
x AS (` + x + `),
` + d + `o AS (SELECT ` + ord + `),
m AS (INSERT INTO bus_messages (topic, ord, id, key, headers, payload, published_at, visible_at)
        SELECT $1, (SELECT v FROM o), x.id, x.key, x.headers, x.payload, x.published_at, coalesce(x.due, clock_timestamp()) FROM x
        WHERE ` + keep + cond + ` ORDER BY x.ord` + returning + `),
g AS (SELECT ` + written + ` > 0 AND EXISTS (SELECT 1 FROM bus_groups WHERE topic = $1) AS due)
SELECT ` + written + `,
       (SELECT count(pg_notify(` + channel + `, $1)) FROM g WHERE ` + channel + ` <> '' AND g.due),
       (SELECT due FROM g)`
}

// arraysSource reads the batch from the arrays $2..$8.
const arraysSource = `SELECT * FROM unnest($2::text[], $3::bytea[], $4::bytea[], $5::bytea[], $6::timestamptz[], $7::timestamptz[], $8::text[])
        WITH ORDINALITY AS x(id, key, headers, payload, published_at, due, dkey, ord)`

func andGuard(guard string) string {
	if guard == "" {
		return ""
	}
	return " AND EXISTS (SELECT 1 FROM guard)"
}

// plainInsert writes a batch with dedup keys: it reads the arrays and
// the window as arraysSource and args name them, the channel ($10) and
// the topic's lock ($11).
var plainInsert = insertSQL("", arraysSource, 9, 10, 0, 11)

// Columns a batch without dedup keys sends only when some message of it
// needs them: left out, every message has an empty key, no headers and is
// due when written.
const (
	colKey = 1 << iota
	colHeaders
	colDue
	colAll = colKey | colHeaders | colDue
)

// undupInserts[lean][cols] writes a batch none of whose messages has a
// dedup key (the bus generated their IDs, or the window is off): without
// the dedup step the statement neither reads nor locks bus_dedup and its
// indexes. It reads the arrays $2 (ids), $3 (payloads), $4 (publish
// times) and then, in this order, those of the keys, headers and due
// times that cols names; the channel (not in the lean form,
// leanPlainSQL) and the topic's lock come last. Each array left out is one
// the client need not encode nor the server decode.
var undupInserts = func() (q [2][colAll + 1]string) {
	for cols := range q[0] {
		n := bits.OnesCount(uint(cols))
		q[0][cols] = insertSQL("", undupSource(cols), 0, 5+n, 0, 6+n)
		q[1][cols] = leanPlainSQL(undupSource(cols), 5+n)
	}
	return q
}()

// leanPlainSQL writes the rows of x (an undupSource) and nothing else,
// in one plain INSERT that returns no row (its command tag counts the
// messages): it neither records the topic nor reads its floor or
// groups. The topic's shared lock ($lockP) is a one-time filter, which
// PostgreSQL evaluates before it produces the first row, so before the
// first write assigns the transaction's id. That id, each message's
// ord, needs no floor: it is assigned after any new group that raised
// the floor committed, and the floor is the first id not yet assigned
// when it did.
func leanPlainSQL(x string, lockP int) string {
	return `INSERT INTO bus_messages (topic, ord, id, key, headers, payload, published_at, visible_at)
SELECT $1, pg_current_xact_id(), x.id, x.key, x.headers, x.payload, x.published_at, coalesce(x.due, clock_timestamp())
FROM (` + x + `) x
WHERE (SELECT pg_advisory_xact_lock_shared(` + strconv.Itoa(lockTopic) + `, $` + strconv.Itoa(lockP) + `::integer)::text) IS NOT NULL
ORDER BY x.ord`
}

// undupSource is the source of undupInserts[cols].
func undupSource(cols int) string {
	arrays, names := "$2::text[], $3::bytea[], $4::timestamptz[]", "id, payload, published_at"
	key, headers, due := "''::bytea", "NULL::bytea", "NULL::timestamptz"
	p := 5
	for _, c := range []struct {
		col       int
		typ, name string
		expr      *string
	}{{colKey, "bytea", "key", &key}, {colHeaders, "bytea", "headers", &headers}, {colDue, "timestamptz", "due", &due}} {
		if cols&c.col != 0 {
			arrays += ", $" + strconv.Itoa(p) + "::" + c.typ + "[]"
			names += ", " + c.name
			*c.expr = "u." + c.name
			p++
		}
	}
	return `SELECT u.id, ` + key + ` AS key, ` + headers + ` AS headers, u.payload, u.published_at, ` + due + ` AS due, u.ord
        FROM unnest(` + arrays + `) WITH ORDINALITY AS u(` + names + `, ord)`
}

// undupArgs returns the statement and parameters that write r (without
// dedup keys) to topic under the topic's lock, notifying channel, or
// with the lean statement when lean.
func (r rows) undupArgs(topic, channel string, lean bool) (string, []any) {
	args := make([]any, 0, 9)
	args = append(args, topic, pgtype.FlatArray[string](r.ids), pgtype.FlatArray[[]byte](r.payloads), pgtype.FlatArray[time.Time](r.at))
	cols := 0
	if slices.ContainsFunc(r.keys, func(k []byte) bool { return len(k) > 0 }) {
		cols |= colKey
		args = append(args, pgtype.FlatArray[[]byte](r.keys))
	}
	if slices.ContainsFunc(r.headers, func(h []byte) bool { return h != nil }) {
		cols |= colHeaders
		args = append(args, pgtype.FlatArray[[]byte](r.headers))
	}
	if slices.ContainsFunc(r.due, func(d *time.Time) bool { return d != nil }) {
		cols |= colDue
		args = append(args, pgtype.FlatArray[*time.Time](r.due))
	}
	if lean {
		return undupInserts[1][cols], append(args, topicLock(topic))
	}
	return undupInserts[0][cols], append(args, channel, topicLock(topic))
}

// lockTopicSQL takes topic $2's shared lock (namespace $1) for the
// transaction: writers share it; a new group, a seek and DeleteTopic take
// it exclusively, and so wait for them.
const lockTopicSQL = `SELECT pg_advisory_xact_lock_shared($1, $2)`

// rows is a batch of messages as the insert's arrays.
type rows struct {
	ids      []string
	keys     [][]byte
	headers  [][]byte
	payloads [][]byte
	at       []time.Time
	due      []*time.Time
	dkeys    []*string
}

// rowsOf returns msgs as arrays. Messages whose ID the caller set get a
// dedup key when the window is on; a later message of the batch with the
// dedup key of an earlier one is left out (it is a duplicate).
func (p publisher) rowsOf(msgs []*backend.Message, dedupAll bool) rows {
	r := rows{
		ids:      make([]string, 0, len(msgs)),
		keys:     make([][]byte, 0, len(msgs)),
		headers:  make([][]byte, 0, len(msgs)),
		payloads: make([][]byte, 0, len(msgs)),
		at:       make([]time.Time, 0, len(msgs)),
		due:      make([]*time.Time, 0, len(msgs)),
		dkeys:    make([]*string, 0, len(msgs)),
	}
	p.fill(&r, msgs, dedupAll)
	return r
}

// pooledRows holds the arrays of Publish's batches between calls: a
// batch's rows are encoded before Publish returns, and nothing keeps
// them.
var pooledRows = sync.Pool{New: func() any { return new(rows) }}

// rowsKeep is the most messages a pooled rows keeps arrays for.
const rowsKeep = 1024

// release drops what r refers to and pools it.
func (r *rows) release() {
	if cap(r.ids) > rowsKeep {
		return
	}
	clear(r.ids[:cap(r.ids)])
	clear(r.keys[:cap(r.keys)])
	clear(r.headers[:cap(r.headers)])
	clear(r.payloads[:cap(r.payloads)])
	clear(r.at[:cap(r.at)])
	clear(r.due[:cap(r.due)])
	clear(r.dkeys[:cap(r.dkeys)])
	pooledRows.Put(r)
}

// fill sets r to msgs as arrays, as rowsOf returns them.
func (p publisher) fill(r *rows, msgs []*backend.Message, dedupAll bool) {
	r.ids, r.keys, r.headers, r.payloads = r.ids[:0], r.keys[:0], r.headers[:0], r.payloads[:0]
	r.at, r.due, r.dkeys = r.at[:0], r.due[:0], r.dkeys[:0]
	var seen map[string]bool
	for _, m := range msgs {
		var dk *string
		if p.dedup > 0 && (dedupAll || !m.IDGenerated) {
			k := m.ID
			if v, ok := m.Headers[backend.HeaderReplayed]; ok {
				k += " " + v
			}
			if seen[k] {
				continue
			}
			if seen == nil {
				seen = map[string]bool{}
			}
			seen[k] = true
			dk = &k
		}
		var due *time.Time
		if at, ok := backend.HeaderTime(m.Headers, backend.HeaderDeliverAt); ok && at.After(time.Now()) {
			due = &at
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		r.ids = append(r.ids, m.ID)
		r.keys = append(r.keys, []byte(m.Key))
		r.headers = append(r.headers, encodeHeaders(m.Headers))
		r.payloads = append(r.payloads, payload)
		r.at = append(r.at, m.PublishedAt)
		r.due = append(r.due, due)
		r.dkeys = append(r.dkeys, dk)
	}
}

// args returns the parameters of an insert from arraysSource: $1..$10
// (a guard's come after them).
func (p publisher) args(topic string, r rows) []any {
	return []any{topic, r.ids, r.keys, r.headers, r.payloads, r.at, r.due, r.dkeys, p.dedup.Milliseconds(), p.channel}
}

// Publish writes the batch in one statement, its own transaction: every
// message is stored, or none. A message whose ID the caller set and that
// topic received within the dedup window is not stored again.
//
// The statement takes the topic's shared lock before it assigns the
// transaction's id (its first write), though its snapshot is older than
// the lock. That is enough for the cursor of a new group, which raises
// the floor to the first id not yet assigned while it holds the lock
// exclusively: a publish that took the lock first has committed before
// the group's snapshot, and its messages lie before the floor; one that
// waited for the group gets an id at or above the floor, and its messages
// lie after the cursor whatever floor its snapshot reads. What the old
// snapshot may miss is a group (or a topic row) that a transaction
// committed while the statement waited for the lock: the publish then
// sends no notification (the group's subscriptions find the messages by
// their poll, within Options.Block) or leaves the topic's row to the
// next publish.
//
// Only a publish that may notify (one per topic and notifyEvery, see
// notifier) or that has dedup keys records the topic's row and reads
// whether the topic has a group; the others use the lean statement,
// which writes the messages and nothing else, and ask for a notification
// after their commit unless the last publish that read the groups found
// none. A group created since then is notified by the next publish that
// reads them; until then its members find the messages by their poll.
func (b *Backend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if b.shut.Load() {
		return fmt.Errorf("postgres: publish %q: %w", topic, backend.ErrClosed)
	}
	b.published.Add(topic)
	r := pooledRows.Get().(*rows)
	defer r.release()
	b.pub.fill(r, msgs, false)
	claimed, covered := b.notes.claim(topic)
	dedup := slices.ContainsFunc(r.dkeys, func(k *string) bool { return k != nil })
	lean := !claimed && !dedup
	var insert string
	var args []any
	if dedup {
		insert, args = plainInsert, append(b.pub.args(topic, *r), topicLock(topic))
		if !claimed {
			args[9] = "" // the channel: no notification in its transaction
		}
	} else {
		insert, args = r.undupArgs(topic, b.pub.channel, lean)
	}
	res, err := b.runInsert(ctx, insert, lean, args)
	heldBack := res.wanted && res.notified == 0
	if lean {
		heldBack = b.notes.grouped(topic)
	} else if err == nil {
		b.notes.saw(topic, res.wanted)
	}
	if covered && (err != nil || res.notified == 0) {
		b.notes.later(topic) // the notification it took over
	}
	if err != nil {
		if b.shut.Load() {
			return fmt.Errorf("postgres: publish %q: %w", topic, backend.ErrClosed)
		}
		return fmt.Errorf("postgres: publish %q: %w", topic, classify(err))
	}
	if heldBack {
		b.notes.later(topic)
	}
	return nil
}

// insertLocked runs insert (an insert from arraysSource that does not
// take the lock itself) under topic's shared lock, in one round trip (a
// pipelined transaction: the insert's snapshot is taken once the lock is
// held), and returns how many messages it stored and whether the
// notification it wanted was held back.
func (b *Backend) insertLocked(ctx context.Context, topic, insert string, args []any) (n int64, heldBack bool, err error) {
	batch := &pgx.Batch{}
	batch.Queue(lockTopicSQL, lockTopic, topicLock(topic))
	batch.Queue(insert, args...)
	br := b.pool.SendBatch(ctx, batch)
	var notified int64
	var wanted bool
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&n, &notified, &wanted)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return n, wanted && notified == 0, err
}

// encodeHeaders writes headers as uvarint-prefixed key and value bytes
// (nil when there are none): exact for any bytes, and cheap.
func encodeHeaders(h map[string]string) []byte {
	if len(h) == 0 {
		return nil
	}
	n := binary.MaxVarintLen64
	for k, v := range h {
		n += len(k) + len(v) + 2*binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(h)))
	for k, v := range h {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

var errBadHeaders = errors.New("headers do not decode")

// decodeHeaders reads what encodeHeaders wrote.
func decodeHeaders(b []byte) (map[string]string, error) {
	if b == nil {
		return nil, nil
	}
	n, w := binary.Uvarint(b)
	if w <= 0 || n > backend.MaxHeaders+2 {
		return nil, errBadHeaders
	}
	b = b[w:]
	h := make(map[string]string, n)
	for range n {
		var k, v string
		var ok bool
		if k, b, ok = readString(b); !ok {
			return nil, errBadHeaders
		}
		if v, b, ok = readString(b); !ok {
			return nil, errBadHeaders
		}
		h[k] = v
	}
	if len(b) != 0 {
		return nil, errBadHeaders
	}
	return h, nil
}

func readString(b []byte) (string, []byte, bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return "", nil, false
	}
	return string(b[w : w+int(n)]), b[w+int(n):], true
}

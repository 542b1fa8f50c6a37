package rawclient

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nuid"
)

// PGRedisTable is the table of the dual-write loop: the columns an outbox
// row has that the loop fills (an ID, a key, the payload and the time).
const PGRedisTable = "bus_bench_raw"

// PGRedisSchema creates PGRedisTable when it does not exist.
const PGRedisSchema = `CREATE TABLE IF NOT EXISTS ` + PGRedisTable + ` (
	seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id         text NOT NULL,
	key        bytea NOT NULL,
	payload    bytea NOT NULL,
	created_at timestamptz NOT NULL DEFAULT clock_timestamp())`

// PGRedisPublisher is the dual write the transactional outbox replaces:
// each batch is one INSERT of its rows (a transaction of its own), then
// one pipeline of XADDs, in the same program. It is the baseline of the
// outbox: the same rows reach the same broker, without the guarantee.
// Not safe for concurrent use: each publishing goroutine has its own.
type PGRedisPublisher struct {
	conn  *pgx.Conn
	redis *RedisPublisher
	query []string // INSERT statements by batch size - 1
	args  []any
}

// NewPGRedisPublisher returns a publisher of batches of up to batch
// payloads that inserts on conn and adds to the stream through rp.
func NewPGRedisPublisher(conn *pgx.Conn, rp *RedisPublisher, batch int) *PGRedisPublisher {
	p := &PGRedisPublisher{conn: conn, redis: rp, query: make([]string, batch), args: make([]any, 0, 2*batch)}
	var q strings.Builder
	q.WriteString("INSERT INTO " + PGRedisTable + " (id, key, payload) VALUES ")
	for i := range batch {
		if i > 0 {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "($%d, '', $%d)", 2*i+1, 2*i+2)
		p.query[i] = q.String()
	}
	return p
}

// Publish inserts payloads (at most the batch size), then adds them to the
// stream.
func (p *PGRedisPublisher) Publish(ctx context.Context, payloads [][]byte) error {
	if len(payloads) > len(p.query) {
		return fmt.Errorf("rawclient: batch of %d, more than %d", len(payloads), len(p.query))
	}
	if len(payloads) == 0 {
		return nil
	}
	p.args = p.args[:0]
	for _, pl := range payloads {
		p.args = append(p.args, nuid.Next(), pl)
	}
	if _, err := p.conn.Exec(ctx, p.query[len(payloads)-1], p.args...); err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	return p.redis.Publish(ctx, payloads)
}

// PGQueue is the raw loop the PostgreSQL backend is measured against: a
// table of its own with a seq, a message ID (unique, as the bus stores
// one, and as a consumer of an at-least-once queue needs to tell a
// redelivery), the payload and a lease, fed by one INSERT per batch,
// read by a leasing UPDATE ... FOR UPDATE SKIP LOCKED of up to Count
// rows and acked by one DELETE per fetched batch: the work of an
// at-least-once queue, without groups, attempts or notifications (an
// empty fetch polls again after PollEvery).
type PGQueue struct {
	Pool      PGPool
	Table     string // a plain identifier
	Count     int
	PollEvery time.Duration
}

// PGPool is what PGQueue needs of a pgxpool.Pool.
type PGPool interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Create creates the table.
func (q *PGQueue) Create(ctx context.Context) error {
	_, err := q.Pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+q.Table+` (
	seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id          text NOT NULL,
	payload     bytea NOT NULL,
	lease_until timestamptz NOT NULL DEFAULT '-infinity')`)
	return err
}

// Drop drops the table.
func (q *PGQueue) Drop(ctx context.Context) error {
	_, err := q.Pool.Exec(ctx, `DROP TABLE IF EXISTS `+q.Table)
	return err
}

// Publish inserts payloads with one statement, each with a new ID.
func (q *PGQueue) Publish(ctx context.Context, payloads [][]byte) error {
	ids := make([]string, len(payloads))
	for i := range ids {
		ids[i] = nuid.Next()
	}
	if _, err := q.Pool.Exec(ctx, `INSERT INTO `+q.Table+` (id, payload) SELECT * FROM unnest($1::text[], $2::bytea[])`, ids, payloads); err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	return nil
}

// Run fetches, hands each payload to h and acks, until ctx ends or a
// statement fails.
func (q *PGQueue) Run(ctx context.Context, h func([]byte)) error {
	fetch := `UPDATE ` + q.Table + ` SET lease_until = clock_timestamp() + interval '30 seconds'
WHERE seq = ANY(ARRAY(SELECT seq FROM ` + q.Table + ` WHERE lease_until <= statement_timestamp() ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED))
RETURNING seq, id, payload`
	ack := `DELETE FROM ` + q.Table + ` WHERE seq = ANY($1)`
	var seqs []int64
	for ctx.Err() == nil {
		rows, err := q.Pool.Query(ctx, fetch, q.Count)
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		seqs = seqs[:0]
		for rows.Next() {
			var seq int64
			var id string
			var payload []byte
			if err := rows.Scan(&seq, &id, &payload); err != nil {
				rows.Close()
				return fmt.Errorf("fetch: %w", err)
			}
			if id == "" {
				rows.Close()
				return fmt.Errorf("fetch: row %d has no ID", seq)
			}
			seqs = append(seqs, seq)
			h(payload)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		if len(seqs) == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(q.PollEvery):
			}
			continue
		}
		if _, err := q.Pool.Exec(ctx, ack, seqs); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
	}
	return nil
}

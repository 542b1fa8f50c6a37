package rawclient

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
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

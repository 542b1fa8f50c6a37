package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus/backend"
)

var (
	_ backend.ResultStore = (*Backend)(nil)
	_ backend.ResultAcker = (*subscription)(nil)
)

// storeResultSQL stores result $3 of message $2 of topic $1 for $4 ms,
// replacing one stored before.
const storeResultSQL = `INSERT INTO bus_results (topic, id, val, until)
VALUES ($1, $2, $3, clock_timestamp() + $4::bigint * interval '1 millisecond')
ON CONFLICT (topic, id) DO UPDATE SET val = excluded.val, until = excluded.until`

// dropExpiredResultsSQL deletes up to 16 results whose ttl
// ran out: each store runs it, so the table holds about the results
// within their ttl while results keep being stored.
const dropExpiredResultsSQL = `DELETE FROM bus_results WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM bus_results WHERE until < clock_timestamp() LIMIT 16))`

// StoreResult implements backend.ResultStore: a row of bus_results
// (its bytes and about 100 bytes more) until its ttl runs out.
func (b *Backend) StoreResult(ctx context.Context, topic, id string, result []byte, ttl time.Duration) error {
	if b.shut.Load() {
		return fmt.Errorf("postgres: store result of %q: %w", topic, backend.ErrClosed)
	}
	batch := &pgx.Batch{}
	queueResult(batch, topic, id, result, ttl)
	if err := b.pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("postgres: store result of %q: %w", topic, classify(err))
	}
	return nil
}

// queueResult queues the statements that store a result.
func queueResult(batch *pgx.Batch, topic, id string, result []byte, ttl time.Duration) {
	batch.Queue(storeResultSQL, topic, id, result, max(ttl.Milliseconds(), 1))
	batch.Queue(dropExpiredResultsSQL)
}

// Result implements backend.ResultStore.
func (b *Backend) Result(ctx context.Context, topic, id string) ([]byte, bool, error) {
	if b.shut.Load() {
		return nil, false, fmt.Errorf("postgres: result of %q: %w", topic, backend.ErrClosed)
	}
	var val []byte
	err := b.pool.QueryRow(ctx, `SELECT val FROM bus_results WHERE topic = $1 AND id = $2 AND until > clock_timestamp()`, topic, id).Scan(&val)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("postgres: result of %q: %w", topic, classify(err))
	}
	return val, true, nil
}

// AckResult implements backend.ResultAcker: the ack and the result's row
// in one transaction (one batch).
func (s *subscription) AckResult(ctx context.Context, ack backend.AckID, id string, result []byte, ttl time.Duration) error {
	a, ok := ackIDOf(ack)
	if !ok {
		return fmt.Errorf("postgres: ack %q with its result: foreign AckID %T", s.topic, ack)
	}
	batch := s.ackBatch([]ackID{a})
	queueResult(batch, s.topic, id, result, ttl)
	if err := s.b.pool.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("postgres: ack %q with its result: %w", s.topic, classify(err))
	}
	return nil
}

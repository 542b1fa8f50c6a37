package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Querier runs a query: *pgx.Conn, *pgxpool.Pool and pgx.Tx implement it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// DeadRow is a row of bus_outbox_dead: a message the relay could never
// publish, and why.
type DeadRow struct {
	Seq       int64     `json:"seq"`
	Topic     string    `json:"topic"`
	ID        string    `json:"id"`
	Key       string    `json:"key,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	FailedAt  time.Time `json:"failed_at"`
	Reason    string    `json:"reason"`
}

// Dead returns the latest dead rows, newest first, at most limit (1 to
// 10000).
func Dead(ctx context.Context, q Querier, limit int) ([]DeadRow, error) {
	if limit < 1 || limit > 10000 {
		return nil, fmt.Errorf("outbox: dead rows: limit %d, want 1 to 10000", limit)
	}
	rows, err := q.Query(ctx, `SELECT seq, topic, id, key, created_at, failed_at, reason
		FROM bus_outbox_dead ORDER BY failed_at DESC, seq DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: dead rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeadRow, error) {
		var d DeadRow
		var key []byte
		err := r.Scan(&d.Seq, &d.Topic, &d.ID, &key, &d.CreatedAt, &d.FailedAt, &d.Reason)
		d.Key = string(key)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: dead rows: %w", err)
	}
	return out, nil
}

// Stats is the state of the outbox tables.
type Stats struct {
	Pending int64     `json:"pending"`         // rows waiting for a relay
	Oldest  time.Time `json:"oldest,omitzero"` // when the oldest waiting row was written; zero when none waits
	Dead    int64     `json:"dead"`            // rows in bus_outbox_dead
}

// ReadStats counts the waiting and the dead rows.
func ReadStats(ctx context.Context, q Querier) (Stats, error) {
	rows, err := q.Query(ctx, `SELECT (SELECT count(*) FROM bus_outbox), (SELECT min(created_at) FROM bus_outbox),
		(SELECT count(*) FROM bus_outbox_dead)`)
	if err != nil {
		return Stats{}, fmt.Errorf("outbox: stats: %w", err)
	}
	var st Stats
	var oldest *time.Time
	_, err = pgx.ForEachRow(rows, []any{&st.Pending, &oldest, &st.Dead}, func() error { return nil })
	if err != nil {
		return Stats{}, fmt.Errorf("outbox: stats: %w", err)
	}
	if oldest != nil {
		st.Oldest = *oldest
	}
	return st, nil
}

// Requeue moves the dead rows with the given sequence numbers back to the
// outbox, at its end and in their old order, for the relays to publish
// again once what made them fail is fixed (a topic created, a row's
// headers mended with SQL, a larger payload limit). Each keeps its
// message ID, so the bus's dedup window stores it once, and its
// partition; it comes after the rows of its key written since it died. It
// returns how many rows moved (a sequence number that is not dead is
// skipped); the relays wake when the caller's transaction commits.
func Requeue(ctx context.Context, x Execer, seqs ...int64) (int64, error) {
	if len(seqs) == 0 {
		return 0, errors.New("outbox: requeue: no sequence numbers given")
	}
	tag, err := x.Exec(ctx, `WITH moved AS (
			DELETE FROM bus_outbox_dead WHERE seq = ANY($1)
			RETURNING seq, part, topic, id, key, headers, payload, deliver_at, expires_at, created_at)
		INSERT INTO bus_outbox (part, topic, id, key, headers, payload, deliver_at, expires_at, created_at)
		SELECT part, topic, id, key, headers, payload, deliver_at, expires_at, created_at FROM moved ORDER BY seq`, seqs)
	if err != nil {
		return 0, fmt.Errorf("outbox: requeue: %w", err)
	}
	return tag.RowsAffected(), nil
}

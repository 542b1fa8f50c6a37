package inbox

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// database is what an Inbox needs of its connection pool, with T the
// transaction type its handlers get: pgxDB (pgx.Tx) and sqlDB (*sql.Tx).
type database[T any] interface {
	// begin starts a transaction at the inbox's isolation level.
	begin(ctx context.Context) (T, error)
	// exec runs a statement in tx and returns the rows it affected.
	exec(ctx context.Context, tx T, query string, args ...any) (int64, error)
	commit(ctx context.Context, tx T) error
	// rollback ends tx; after an error the connection is not reused.
	rollback(ctx context.Context, tx T)
	// execPool runs a statement outside a transaction.
	execPool(ctx context.Context, query string, args ...any) (int64, error)
	// timeRow runs a query that returns one row of one timestamp (or
	// none: found is false).
	timeRow(ctx context.Context, query string, args ...any) (t time.Time, found bool, err error)
}

type pgxDB struct {
	pool *pgxpool.Pool
	opts pgx.TxOptions
}

func (p pgxDB) begin(ctx context.Context) (pgx.Tx, error) { return p.pool.BeginTx(ctx, p.opts) }

func (p pgxDB) exec(ctx context.Context, tx pgx.Tx, query string, args ...any) (int64, error) {
	tag, err := tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (p pgxDB) commit(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }

// rollback runs with ctx even when it is done: pgx then closes the
// connection, which ends the transaction on the server.
func (p pgxDB) rollback(ctx context.Context, tx pgx.Tx) { _ = tx.Rollback(ctx) }

func (p pgxDB) execPool(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := p.pool.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (p pgxDB) timeRow(ctx context.Context, query string, args ...any) (time.Time, bool, error) {
	var t time.Time
	err := p.pool.QueryRow(ctx, query, args...).Scan(&t)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	return t, err == nil, err
}

type sqlDB struct {
	db   *sql.DB
	opts sql.TxOptions
}

// begin starts a transaction bound to ctx: database/sql rolls it back
// when ctx ends before Commit.
func (s sqlDB) begin(ctx context.Context) (*sql.Tx, error) { return s.db.BeginTx(ctx, &s.opts) }

func (s sqlDB) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlDB) commit(_ context.Context, tx *sql.Tx) error { return tx.Commit() }

func (s sqlDB) rollback(_ context.Context, tx *sql.Tx) { _ = tx.Rollback() }

func (s sqlDB) execPool(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlDB) timeRow(ctx context.Context, query string, args ...any) (time.Time, bool, error) {
	var t time.Time
	err := s.db.QueryRowContext(ctx, query, args...).Scan(&t)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, false, nil
	}
	return t, err == nil, err
}

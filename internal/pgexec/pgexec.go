// Package pgexec is the statement runner the outbox and inbox packages
// take: pgx's handles run statements as they are, and SQL adapts a
// database/sql handle to the same interface.
package pgexec

import (
	"context"
	"database/sql"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs a statement. pgx.Tx, *pgx.Conn and *pgxpool.Pool implement
// it; SQL adapts a database/sql handle.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SQLExecer is what SQL needs of a database/sql handle: *sql.DB, *sql.Conn
// and *sql.Tx implement it, with any PostgreSQL driver.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SQL adapts a database/sql handle to Execer.
func SQL(db SQLExecer) Execer { return sqlExecer{db} }

type sqlExecer struct{ db SQLExecer }

// Exec runs query; the tag it returns carries the rows affected when the
// driver reports them.
func (s sqlExecer) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return pgconn.CommandTag{}, nil
	}
	return pgconn.NewCommandTag("EXEC " + strconv.FormatInt(n, 10)), nil
}

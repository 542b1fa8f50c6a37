package inbox

import (
	"context"
	"database/sql"
	_ "embed" // the schema
	"fmt"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/pgexec"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed schema.sql
var schema string

// Schema returns the SQL that Migrate runs, for those who apply
// migrations with their own tool.
func Schema() string { return schema }

// Execer runs a statement. *pgx.Conn, *pgxpool.Pool and pgx.Tx implement
// it; SQL adapts a database/sql handle.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// SQLExecer is what SQL needs of a database/sql handle: *sql.DB, *sql.Conn
// and *sql.Tx implement it, with any PostgreSQL driver.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SQL adapts a database/sql handle for Migrate.
func SQL(db SQLExecer) Execer { return pgexec.SQL(db) }

// Migrate creates the inbox table and its index (see the package doc), or
// does nothing when they exist. It runs the statements as one batch
// without parameters (the simple query protocol, atomic): give it a
// *pgx.Conn, a *pgxpool.Pool, or SQL(db).
func Migrate(ctx context.Context, db Execer) error {
	if db == nil {
		return fmt.Errorf("inbox: migrate: %w: nil db", bus.ErrInvalidOption)
	}
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	return nil
}

package postgres

import (
	"context"
	_ "embed" // the schema
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed schema.sql
var schema string

// Schema returns the SQL that Migrate runs, for those who apply
// migrations with their own tool.
func Schema() string { return schema }

// Execer runs a statement: *pgx.Conn, *pgxpool.Pool and pgx.Tx implement
// it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate creates the backend's tables and indexes, or does nothing when
// they exist. It runs them as one batch without parameters (the simple
// query protocol, atomic), under an advisory lock so that two processes
// starting at once do not race.
func Migrate(ctx context.Context, db Execer) error {
	if db == nil {
		return fmt.Errorf("postgres: migrate: %w: nil database", ErrInvalidOption)
	}
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

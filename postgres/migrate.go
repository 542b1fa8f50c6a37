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

// schemaMark is the comment the last statement of schema.sql sets.
const schemaMark = "bus postgres schema v1"

// markedSQL reports whether the schema is in place: it reads the mark
// without taking any lock on the tables.
const markedSQL = `SELECT count(*) FROM pg_description d JOIN pg_class c ON c.oid = d.objoid
WHERE c.oid = to_regclass('bus_topics') AND d.objsubid = 0 AND d.description = '` + schemaMark + `'`

// Migrate creates the backend's tables and indexes, or does nothing when
// they exist. It first looks for the schema's mark, without taking a lock
// on the tables (creating an index that exists, or setting a table's
// storage parameters, would wait for the writers of the table and make
// them wait). Otherwise it runs the schema as one batch without
// parameters (the simple query protocol, atomic), under an advisory lock
// so that two processes starting at once do not race.
func Migrate(ctx context.Context, db Execer) error {
	if db == nil {
		return fmt.Errorf("postgres: migrate: %w: nil database", ErrInvalidOption)
	}
	tag, err := db.Exec(ctx, "SELECT 1 WHERE ("+markedSQL+") = 1")
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

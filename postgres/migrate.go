package postgres

import (
	"context"
	_ "embed" // the schema
	"errors"
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

// schemaMark is the comment the last statement of schema.sql sets;
// oldMark is the one of the first layout, which Migrate refuses. A
// database of schema v2 or v3 is brought to v4 by running schema.sql
// again: v3 adds bus_leases, v4 bus_results, and the rows of v2 keep
// their meaning.
const (
	schemaMark = "bus postgres schema v4"
	oldMark    = "bus postgres schema v1"
)

// markSQL reads the schema's mark (empty: none) without taking any lock
// on the tables.
const markSQL = `SELECT coalesce((SELECT d.description FROM pg_description d JOIN pg_class c ON c.oid = d.objoid
WHERE c.oid = to_regclass('bus_topics') AND d.objsubid = 0), '')`

// ErrOldSchema is what Migrate (and New, OpenURL) return for a database
// that holds the first layout of the tables (schema v1): its delivery
// rows cannot be carried into the cursors of v2 and later. Drain its groups, then
// drop the bus_* tables (or point the backend at another database) and
// migrate again.
var ErrOldSchema = errors.New("the database holds bus postgres schema v1; drain it and drop the bus_* tables to migrate to v4")

// Migrate creates the backend's tables and indexes, or does nothing when
// they exist; it brings a database of schema v2 or v3 to v4 (it adds
// bus_leases and bus_results). It first looks for the schema's mark, without taking a lock
// on the tables (creating an index that exists, or setting a table's
// storage parameters, would wait for the writers of the table and make
// them wait). Otherwise it runs the schema as one batch without
// parameters (the simple query protocol, atomic), under an advisory lock
// so that two processes starting at once do not race. A database with
// the tables of schema v1 is refused with an error wrapping ErrOldSchema,
// before any change.
func Migrate(ctx context.Context, db Execer) error {
	if db == nil {
		return fmt.Errorf("postgres: migrate: %w: nil database", ErrInvalidOption)
	}
	for _, mark := range []string{schemaMark, oldMark} {
		tag, err := db.Exec(ctx, "SELECT 1 WHERE ("+markSQL+") = '"+mark+"'")
		if err != nil {
			return fmt.Errorf("postgres: migrate: %w", err)
		}
		if tag.RowsAffected() == 1 {
			if mark == oldMark {
				return fmt.Errorf("postgres: migrate: %w", ErrOldSchema)
			}
			return nil
		}
	}
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

package outbox

import (
	"context"
	_ "embed" // the schema
	"fmt"
)

//go:embed schema.sql
var schema string

// Schema returns the SQL that Migrate runs, for those who apply
// migrations with their own tool.
func Schema() string { return schema }

// Migrate creates the outbox tables, their index and the trigger that
// wakes the relays (see the package doc), or does nothing when they exist.
// It runs the statements as one batch without parameters (the simple query
// protocol, atomic): give it a *pgx.Conn, a *pgxpool.Pool, or SQL(db).
func Migrate(ctx context.Context, db Execer) error {
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}

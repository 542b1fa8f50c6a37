package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/eventbus-go/bus/backend"
)

// classify marks with backend.Permanent the errors no retry fixes: a
// missing table or function (the schema was not migrated), a missing
// privilege, a read-only or otherwise refused transaction, a failed
// login. Connection errors, timeouts, serialization failures, deadlocks
// and a server shutting down are transient.
func classify(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case "42P01", "42883", "42703", // undefined table, function, column
		"42501",          // insufficient privilege
		"28000", "28P01", // invalid authorization, password
		"3D000": // invalid catalog (database) name
		return backend.Permanent(err)
	}
	return err
}

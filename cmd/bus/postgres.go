package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/eventbus-go/bus/internal/urlopt"
	"github.com/eventbus-go/bus/postgres"
)

// postgresCmd runs "bus postgres migrate".
func postgresCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "migrate" {
		return postgresMigrateCmd(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, "Usage: bus postgres migrate --url postgres://...\n\n"+
		"migrate creates the PostgreSQL backend's tables (idempotent). bus.Open and\nthe other commands create them too, unless the URL says migrate=false.\nSee docs/postgres.md.\n")
	return exitUsage
}

func postgresMigrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bus postgres migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rawURL := fs.String("url", defaultURL(), "postgres:// URL of the database (default $BUS_URL)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bus postgres migrate --url URL\n\nCreates the backend's tables (bus_topics, bus_messages, bus_groups,\nbus_leases, bus_deliveries, bus_keyord, bus_dedup, bus_locks, bus_members)\nand their indexes, or brings a database of schema v2 to v3; does nothing\nwhen they exist.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 || !strings.HasPrefix(*rawURL, "postgres://") && !strings.HasPrefix(*rawURL, "postgresql://") {
		fmt.Fprintln(stderr, "bus postgres migrate: give --url postgres://... and no arguments")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	u, err := url.Parse(*rawURL)
	if err != nil {
		fmt.Fprintln(stderr, "bus postgres migrate: the URL does not parse")
		return exitUsage
	}
	// Opening the backend migrates, unless the URL says migrate=false;
	// Migrate runs again in any case (it is idempotent).
	be, err := postgres.OpenURL(ctx, u)
	if err != nil {
		fmt.Fprintf(stderr, "bus postgres migrate: %v\n", err)
		return exitFailure
	}
	defer be.Close()
	if err := postgres.Migrate(ctx, be.Pool()); err != nil {
		fmt.Fprintf(stderr, "bus postgres migrate: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, "bus postgres migrate: the backend's tables are in place")
	return exitOK
}

// isPostgresURL reports whether raw names the PostgreSQL backend.
func isPostgresURL(raw string) bool {
	return strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://")
}

// pgTableStatsSQL reads the size (heap, indexes and TOAST) and the live
// and dead rows of every bus table, as the statistics collector last
// counted them.
const pgTableStatsSQL = `SELECT relname, pg_total_relation_size(relid), n_live_tup, n_dead_tup, autovacuum_count + vacuum_count
FROM pg_stat_user_tables WHERE relname LIKE 'bus\_%' AND relname NOT LIKE 'bus\_bench\_%' ORDER BY relname`

// writePGTableStats prints one line per bus table of the database at raw:
// its total size, live and dead rows, and how often it was vacuumed. It
// reports a failure on out and returns.
func writePGTableStats(ctx context.Context, raw string, out io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	u, err := url.Parse(raw)
	if err != nil {
		fmt.Fprintln(out, "bus bench: table sizes: the URL does not parse")
		return
	}
	be, err := postgres.OpenURL(ctx, u)
	if err != nil {
		fmt.Fprintf(out, "bus bench: table sizes: %v\n", err)
		return
	}
	defer be.Close()
	rows, err := be.Pool().Query(ctx, pgTableStatsSQL)
	if err != nil {
		fmt.Fprintf(out, "bus bench: table sizes: %v\n", urlopt.RedactError(err, u))
		return
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name                     string
			size, live, dead, vacuum int64
		)
		if err := rows.Scan(&name, &size, &live, &dead, &vacuum); err != nil {
			fmt.Fprintf(out, "bus bench: table sizes: %v\n", err)
			return
		}
		fmt.Fprintf(out, "table %-15s %8.1f MiB  live %d  dead %d  vacuums %d\n", name, mib(uint64(size)), live, dead, vacuum)
	}
	if err := rows.Err(); err != nil {
		fmt.Fprintf(out, "bus bench: table sizes: %v\n", urlopt.RedactError(err, u))
	}
}

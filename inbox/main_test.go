package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/inbox"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// Re-executed as the consumer the kill test SIGKILLs.
		runChild()
		return
	}
	goleak.VerifyTestMain(m, natstest.LeakIgnores()...)
}

// watchdog fails the test with a message if it is still running after d.
func watchdog(t *testing.T, d time.Duration) {
	t.Helper()
	name := t.Name()
	timer := time.AfterFunc(d, func() {
		panic(fmt.Sprintf("watchdog: %s did not finish within %v", name, d))
	})
	t.Cleanup(func() { timer.Stop() })
}

// database is a schema of its own on a private server: its URL selects
// the schema, and the inbox and effect tables exist in it.
type database struct {
	url    string
	schema string
	pool   *pgxpool.Pool
}

// newDatabase creates schema name on srv, migrates the inbox into it and
// creates the effect table: one row per run of a handler's effect,
// without a unique key, so that an effect applied twice shows.
func newDatabase(t *testing.T, srv *pgtest.Server, name string) *database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := srv.URL() + "&search_path=" + name
	conn, err := pgx.Connect(ctx, srv.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, inbox.Migrate(ctx, pool), "migrate")
	require.NoError(t, inbox.Migrate(ctx, pool), "a second migrate does nothing")
	_, err = pool.Exec(ctx, "CREATE TABLE effects (topic text NOT NULL, id text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())")
	require.NoError(t, err)
	return &database{url: url, schema: name, pool: pool}
}

// sqlDB opens the database through database/sql, closed when the test
// ends.
func (db *database) sqlDB(t *testing.T) *sql.DB {
	t.Helper()
	s, err := sql.Open("pgx", db.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// effects counts the effect rows per message ID.
func (db *database) effects(t *testing.T) map[string]int {
	t.Helper()
	got, err := db.readEffects()
	require.NoError(t, err)
	return got
}

// readEffects counts the effect rows per message ID, for conditions that
// poll.
func (db *database) readEffects() (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.pool.Query(ctx, "SELECT id, count(*) FROM effects GROUP BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		got[id] = n
	}
	return got, rows.Err()
}

// count returns the result of a count(*) query.
func (db *database) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	require.NoError(t, db.pool.QueryRow(ctx, query, args...).Scan(&n))
	return n
}

var schemas atomic.Int64

// schemaName returns a new schema name.
func schemaName() string { return fmt.Sprintf("s%d", schemas.Add(1)) }

// effect is the handler under test: it records one run of its effect.
func effect(ctx context.Context, tx pgx.Tx, d *bus.Delivery) error {
	_, err := tx.Exec(ctx, "INSERT INTO effects (topic, id) VALUES ($1, $2)", d.Topic, d.ID)
	return err
}

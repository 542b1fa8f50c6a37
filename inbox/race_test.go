package inbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/inbox"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
)

// delivery is a delivery of message id to the group "g" of "orders"; the
// inbox settles nothing, so it needs no subscription.
func delivery(id string) *bus.Delivery {
	return &bus.Delivery{Message: bus.Message{ID: id}, Topic: "orders", Group: "g"}
}

func TestConcurrentDuplicate(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	srv := pgtest.Start(t)
	db := newDatabase(t, srv, schemaName())
	boom := errors.New("boom")
	tests := []struct {
		name      string
		isolation inbox.Isolation
		first     error // what the first delivery's handler returns
	}{
		{"FirstCommitsAndSecondIsAckedWithoutRunning", inbox.ReadCommitted, nil},
		{"FirstRollsBackAndSecondRuns", inbox.ReadCommitted, boom},
		{"SerializableFirstCommitsAndSecondIsRetried", inbox.Serializable, nil},
		{"SerializableFirstRollsBackAndSecondRuns", inbox.Serializable, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			in, err := inbox.New(db.pool, inbox.WithIsolation(tt.isolation))
			require.NoError(t, err)
			id := "race-" + schemaName()
			var runs atomic.Int64
			release := make(chan error)
			h := in.Handle(func(ctx context.Context, tx pgx.Tx, d *bus.Delivery) error {
				if err := effect(ctx, tx, d); err != nil {
					return err
				}
				if runs.Add(1) == 1 {
					return <-release // the first holds its row until released
				}
				return nil
			})
			first, second := make(chan error, 1), make(chan error, 1)
			go func() { first <- h(ctx, delivery(id)) }()
			require.Eventually(t, func() bool { return runs.Load() == 1 }, 10*time.Second, time.Millisecond,
				"the first delivery runs its handler")
			go func() { second <- h(ctx, delivery(id)) }()
			require.Eventually(t, func() bool {
				return db.count(t, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'") == 1
			}, 10*time.Second, time.Millisecond, "the second delivery waits on the first's row")

			release <- tt.first
			require.ErrorIs(t, <-first, tt.first, "the first returns its handler's error")
			err = <-second
			switch {
			case tt.first != nil:
				require.NoError(t, err, "the first rolled back: the second runs and commits")
				assert.EqualValues(t, 2, runs.Load(), "the handler ran for both")
			case tt.isolation == inbox.ReadCommitted:
				require.NoError(t, err, "the first committed: the second is acked")
				assert.EqualValues(t, 1, runs.Load(), "the second did not run")
			default:
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr, "the second fails")
				assert.Equal(t, "40001", pgErr.Code, "with a serialization failure, which the bus retries")
				assert.EqualValues(t, 1, runs.Load(), "the second did not run")
				require.NoError(t, h(ctx, delivery(id)), "the retry is acked")
				assert.EqualValues(t, 1, runs.Load(), "and does not run")
			}
			assert.Equal(t, 1, db.effects(t)[id], "the effect is applied once")
		})
	}
}

func TestPruneDeletesRowsOlderThanRetentionInBatches(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	srv := pgtest.Start(t)
	db := newDatabase(t, srv, schemaName())
	ctx := context.Background()
	_, err := db.pool.Exec(ctx, `INSERT INTO bus_inbox (topic, group_name, id, processed_at)
		SELECT 'orders', 'g', 'old-' || i, now() - interval '2 hours' - i * interval '1 second' FROM generate_series(1, 2500) i`)
	require.NoError(t, err)
	in, err := inbox.New(db.pool, inbox.WithPruneBatch(1000))
	require.NoError(t, err)
	for i := range 10 {
		require.NoError(t, in.Handle(effect)(ctx, delivery("new-"+string(rune('a'+i)))))
	}

	n, err := in.Prune(ctx, time.Hour)
	require.NoError(t, err)
	assert.EqualValues(t, 2500, n, "every row older than the retention, over three batches")
	assert.Equal(t, 10, db.count(t, "SELECT count(*) FROM bus_inbox"), "the recent rows stay")
	assert.Zero(t, db.count(t, "SELECT count(*) FROM bus_inbox WHERE id LIKE 'old-%'"), "no old row stays")
	n, err = in.Prune(ctx, time.Hour)
	require.NoError(t, err)
	assert.Zero(t, n, "nothing is left to prune")

	// A message whose row was pruned is handled again: what the retention
	// rule guards against.
	_, err = db.pool.Exec(ctx, "UPDATE bus_inbox SET processed_at = now() - interval '2 hours' WHERE id = 'new-a'")
	require.NoError(t, err)
	n, err = in.Prune(ctx, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.NoError(t, in.Handle(effect)(ctx, delivery("new-a")))
	assert.Equal(t, 2, db.effects(t)["new-a"], "handled again once its row was pruned")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = in.Prune(cctx, time.Hour)
	require.ErrorIs(t, err, context.Canceled, "a done ctx ends Prune")
}

func TestCallsReturnByTheDeadlineWhenTheNetworkIsDead(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	srv := pgtest.Start(t)
	db := newDatabase(t, srv, schemaName())
	proxy, err := faultproxy.New(srv.Addr())
	require.NoError(t, err)
	defer proxy.Close()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@"+proxy.Addr()+"/postgres?sslmode=disable&search_path="+db.schema)
	require.NoError(t, err)
	defer pool.Close()
	in, err := inbox.New(pool)
	require.NoError(t, err)
	require.NoError(t, in.Handle(effect)(ctx, delivery("before")), "through the proxy while it forwards")

	proxy.Blackhole(true)
	defer proxy.Blackhole(false)
	const deadline = 300 * time.Millisecond
	calls := map[string]func(context.Context) error{
		"Handle": func(ctx context.Context) error { return in.Handle(effect)(ctx, delivery("during")) },
		"Prune":  func(ctx context.Context) error { _, err := in.Prune(ctx, time.Hour); return err },
		"Processed": func(ctx context.Context) error {
			_, _, err := in.Processed(ctx, "orders", "g", "before")
			return err
		},
	}
	for name, call := range calls {
		cctx, cancel := context.WithTimeout(ctx, deadline)
		start := time.Now()
		err := call(cctx)
		cancel()
		require.Error(t, err, "%s fails while the network is dead", name)
		assert.Less(t, time.Since(start), deadline+time.Second, "%s returns by its ctx's deadline", name)
	}
}

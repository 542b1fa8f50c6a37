package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/bustest"
	"github.com/eventbus-go/bus/inbox"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/observer"
)

func TestNewRefusesBadInputBeforeIO(t *testing.T) {
	_, err := inbox.New(nil)
	require.ErrorIs(t, err, bus.ErrInvalidOption, "a nil pool")
	_, err = inbox.NewSQL(nil)
	require.ErrorIs(t, err, bus.ErrInvalidOption, "a nil db")

	// A pool to a port nobody listens on: any I/O would fail differently.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	require.NoError(t, err)
	defer pool.Close()
	tests := []struct {
		name string
		opt  inbox.Option
	}{
		{"nil option", nil},
		{"isolation 0", inbox.WithIsolation(0)},
		{"isolation out of range", inbox.WithIsolation(inbox.Serializable + 1)},
		{"prune batch 0", inbox.WithPruneBatch(0)},
		{"prune batch too large", inbox.WithPruneBatch(100001)},
	}
	for _, tt := range tests {
		_, err := inbox.New(pool, tt.opt)
		assert.ErrorIs(t, err, bus.ErrInvalidOption, tt.name)
	}

	in, err := inbox.New(pool)
	require.NoError(t, err)
	require.Panics(t, func() { in.Handle(nil) }, "Handle with a nil handler")
	err = in.Handle(effect)(context.Background(), &bus.Delivery{Message: bus.Message{ID: "x"}})
	require.ErrorIs(t, err, bus.ErrInvalidMessage, "a delivery without topic and group is refused")
	require.True(t, bus.IsRejected(err), "and not retried")
	_, err = in.Prune(context.Background(), time.Second)
	require.ErrorIs(t, err, bus.ErrInvalidOption, "a retention under a minute")
	require.ErrorIs(t, inbox.Migrate(context.Background(), nil), bus.ErrInvalidOption, "migrate a nil db")
}

// inboxes returns the same handler through a pgx and a database/sql
// inbox on db, so each case runs on both.
func inboxes(t *testing.T, db *database, h func(ctx context.Context, d *bus.Delivery) error, opts ...inbox.Option) map[string]bus.Handler {
	t.Helper()
	px, err := inbox.New(db.pool, opts...)
	require.NoError(t, err)
	sx, err := inbox.NewSQL(db.sqlDB(t), opts...)
	require.NoError(t, err)
	return map[string]bus.Handler{
		"pgx": px.Handle(func(ctx context.Context, tx pgx.Tx, d *bus.Delivery) error {
			if err := effect(ctx, tx, d); err != nil {
				return err
			}
			return h(ctx, d)
		}),
		"database/sql": sx.Handle(func(ctx context.Context, tx *sql.Tx, d *bus.Delivery) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO effects (topic, id) VALUES ($1, $2)", d.Topic, d.ID); err != nil {
				return err
			}
			return h(ctx, d)
		}),
	}
}

func TestHandle(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	srv := pgtest.Start(t)
	ctx := context.Background()

	t.Run("RedeliveryOfCommittedMessageIsAckedWithoutRunning", func(t *testing.T) {
		db := newDatabase(t, srv, schemaName())
		var runs atomic.Int64
		for name, h := range inboxes(t, db, func(context.Context, *bus.Delivery) error { runs.Add(1); return nil }) {
			runs.Store(0)
			msg := &bus.Message{ID: "m-" + name, Payload: []byte("x")}
			for i := range 3 {
				res := bustest.Run(t, h, msg, bustest.WithTopic("orders"), bustest.WithGroup("billing"), bustest.WithAttempt(i+1))
				require.Equal(t, bus.OutcomeAcked, res.Outcome, "%s: delivery %d is acked: %v", name, i+1, res)
			}
			assert.EqualValues(t, 1, runs.Load(), "%s: the handler runs for the first delivery only", name)
			assert.Equal(t, 1, db.effects(t)[msg.ID], "%s: the effect is applied once", name)

			res := bustest.Run(t, h, msg, bustest.WithTopic("orders"), bustest.WithGroup("shipping"))
			require.Equal(t, bus.OutcomeAcked, res.Outcome, "%s: %v", name, res)
			assert.EqualValues(t, 2, runs.Load(), "%s: another group handles the message too", name)
		}
	})

	t.Run("HandlerErrorRollsBackAndTheRetryAppliesTheEffectOnce", func(t *testing.T) {
		db := newDatabase(t, srv, schemaName())
		boom := errors.New("boom")
		var runs atomic.Int64
		for name, h := range inboxes(t, db, func(_ context.Context, d *bus.Delivery) error {
			runs.Add(1)
			if d.Attempt < 3 {
				return boom // after the effect's insert: it must roll back
			}
			return nil
		}) {
			runs.Store(0)
			b, err := bus.Open(ctx, "mem://", bus.WithObserver(observer.Nop()))
			require.NoError(t, err)
			acked := make(chan string, 1)
			topic := "orders"
			sub, err := b.Subscribe(ctx, topic, func(ctx context.Context, d *bus.Delivery) error {
				err := h(ctx, d)
				if err == nil {
					acked <- d.ID
				}
				return err
			}, bus.WithGroup("billing"), bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }))
			require.NoError(t, err)
			require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "r-" + name}))
			select {
			case id := <-acked:
				require.Equal(t, "r-"+name, id)
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: the message was not handled within 20s", name)
			}
			require.NoError(t, sub.Close(ctx))
			require.NoError(t, b.Close(ctx))
			assert.EqualValues(t, 3, runs.Load(), "%s: two failed attempts and one that committed", name)
			assert.Equal(t, 1, db.effects(t)["r-"+name], "%s: the rolled-back attempts left no effect", name)
		}
	})

	t.Run("PanicRollsBack", func(t *testing.T) {
		db := newDatabase(t, srv, schemaName())
		for name, h := range inboxes(t, db, func(context.Context, *bus.Delivery) error { panic("handler panics") }) {
			d := bustest.NewDelivery(t, &bus.Message{ID: "p-" + name}, bustest.WithTopic("orders"))
			require.PanicsWithValue(t, "handler panics", func() { _ = h(ctx, d.Delivery) }, name)
			assert.Zero(t, db.effects(t)["p-"+name], "%s: the effect rolled back", name)
			assert.Zero(t, db.count(t, "SELECT count(*) FROM bus_inbox WHERE id = $1", "p-"+name), "%s: not recorded", name)
		}
	})

	t.Run("ProcessedReportsTheRecord", func(t *testing.T) {
		db := newDatabase(t, srv, schemaName())
		in, err := inbox.New(db.pool)
		require.NoError(t, err)
		_, ok, err := in.Processed(ctx, "orders", "default", "q")
		require.NoError(t, err)
		require.False(t, ok, "not processed yet")
		d := bustest.NewDelivery(t, &bus.Message{ID: "q"}, bustest.WithTopic("orders"))
		require.NoError(t, in.Handle(effect)(ctx, d.Delivery))
		at, ok, err := in.Processed(ctx, "orders", "default", "q")
		require.NoError(t, err)
		require.True(t, ok, "processed")
		assert.WithinDuration(t, time.Now(), at, time.Minute, "processed now")
	})

	t.Run("DatabaseSQLMigratesPrunesAndReportsProcessed", func(t *testing.T) {
		db := newDatabase(t, srv, schemaName())
		sdb := db.sqlDB(t)
		require.NoError(t, inbox.Migrate(ctx, inbox.SQL(sdb)), "migrate through database/sql over the existing tables")
		assert.Contains(t, inbox.Schema(), "CREATE TABLE IF NOT EXISTS bus_inbox", "Schema returns what Migrate runs")
		in, err := inbox.NewSQL(sdb, inbox.WithPruneBatch(1))
		require.NoError(t, err)
		res := bustest.Run(t, in.Handle(func(ctx context.Context, tx *sql.Tx, d *bus.Delivery) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO effects (topic, id) VALUES ($1, $2)", d.Topic, d.ID)
			return err
		}), &bus.Message{ID: "s"}, bustest.WithTopic("orders"))
		require.Equal(t, bus.OutcomeAcked, res.Outcome, "%v", res)
		_, ok, err := in.Processed(ctx, "orders", "default", "s")
		require.NoError(t, err)
		require.True(t, ok, "processed")
		_, ok, err = in.Processed(ctx, "orders", "default", "unknown")
		require.NoError(t, err)
		require.False(t, ok, "another message is not")
		_, err = db.pool.Exec(ctx, "UPDATE bus_inbox SET processed_at = now() - interval '2 hours'")
		require.NoError(t, err)
		n, err := in.Prune(ctx, time.Hour)
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "the row is pruned in batches of one")
	})
}

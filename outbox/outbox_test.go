package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/outbox"
)

// noIO fails the test when Publish reaches the database.
type noIO struct{ t *testing.T }

func (n noIO) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	n.t.Error("Publish did I/O for input it should have refused")
	return pgconn.CommandTag{}, errors.New("unexpected")
}

func TestPublishRefusesBadInputBeforeIOAsBusPublishDoes(t *testing.T) {
	ctx := context.Background()
	err := outbox.Publish(ctx, noIO{t}, "bad topic", &bus.Message{})
	require.ErrorIs(t, err, bus.ErrInvalidTopic)

	err = outbox.Publish(ctx, noIO{t}, "orders", &bus.Message{Payload: []byte("ok")},
		&bus.Message{Headers: map[string]string{"bus-reserved": "x"}}, nil)
	var pe *bus.PublishError
	require.ErrorAs(t, err, &pe)
	assert.True(t, pe.Rejected, "nothing of the batch is written")
	require.Len(t, pe.Failed, 2, "the reserved header and the nil message are refused")
	assert.ErrorIs(t, err, bus.ErrInvalidMessage)

	err = outbox.Publish(ctx, noIO{t}, "orders", &bus.Message{Payload: make([]byte, 1<<20+1)})
	require.ErrorIs(t, err, bus.ErrPayloadTooLarge)

	err = outbox.Publish(ctx, nil, "orders", &bus.Message{})
	require.ErrorIs(t, err, bus.ErrInvalidOption, "a nil transaction is refused, not a panic")
}

// The outbox refuses the times bus.Publish refuses (outside what int64
// nanoseconds since the Unix epoch hold), so a row it stores can always
// be relayed.
func TestPublishRefusesTimesNoBackendCarries(t *testing.T) {
	ctx := context.Background()
	far := time.Unix(1<<62, 0)
	tests := []struct {
		name, field string
		m           *bus.Message
	}{
		{"far DeliverAt", "DeliverAt", &bus.Message{DeliverAt: far}},
		{"far ExpiresAt", "ExpiresAt", &bus.Message{ExpiresAt: far}},
		{"DeliverAt a millisecond past the last", "DeliverAt", &bus.Message{DeliverAt: time.UnixMilli(9223372036855)}},
		{"ExpiresAt before the first", "ExpiresAt", &bus.Message{ExpiresAt: time.Unix(-1<<62, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := outbox.Publish(ctx, noIO{t}, "orders", tt.m)
			require.ErrorIs(t, err, bus.ErrInvalidMessage)
			assert.Contains(t, err.Error(), tt.field, "the error names the field")
		})
	}
}

func TestRollbackPublishesNothingAndCommitPublishesInOrderPerKey(t *testing.T) {
	defer watchdog(t, time.Minute)()
	srv, conn := startDB(t)
	ctx := context.Background()
	b := memBus(t)

	lost := write(t, conn, "orders", true, keyed(20, 4, "rolled-back")...)
	var want []*bus.Message
	for i := range 5 {
		want = append(want, write(t, conn, "orders", false, keyed(60, 4, "tx"+string(rune('a'+i)))...)...)
	}
	for _, m := range append(lost, want...) {
		require.NotEmpty(t, m.ID, "Publish assigns IDs")
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)
	r, err := outbox.NewRelay(srv.URL(), b, outbox.WithBatchSize(50), outbox.WithPollInterval(50*time.Millisecond),
		outbox.WithMeterProvider(mp), outbox.WithObserver(observer.Nop()))
	require.NoError(t, err)
	c := collect(t, b, "orders")
	require.Eventually(t, func() bool { return c.count() >= len(want) && pending(t, conn) == 0 }, 20*time.Second, 10*time.Millisecond,
		"the relay publishes the committed rows and deletes them")
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	closeRelay(t, r)
	c.requireExactly(t, want)
	assert.Equal(t, int64(len(want)), sumCounter(rm, outbox.PublishedMetric), "the published counter counts every row")
	assert.True(t, hasMetric(rm, outbox.PendingMetric) && hasMetric(rm, outbox.LagMetric), "the backlog gauges are reported")
}

func sumCounter(rm metricdata.ResourceMetrics, name string) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, dp := range s.DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}

func hasMetric(rm metricdata.ResourceMetrics, name string) bool {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return true
			}
		}
	}
	return false
}

func TestPublishThroughDatabaseSQLRollsBackAndCommits(t *testing.T) {
	defer watchdog(t, time.Minute)()
	srv, conn := startDB(t)
	ctx := context.Background()
	db := sqlDB(t, srv.URL())
	_, err := db.ExecContext(ctx, outbox.Schema())
	require.NoError(t, err, "the schema applies again through another client, as a migration tool would run it")
	require.NoError(t, outbox.Migrate(ctx, outbox.SQL(db)), "Migrate runs through database/sql too")
	for _, rollback := range []bool{true, false} {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, outbox.Publish(ctx, outbox.SQL(tx), "orders",
			&bus.Message{Key: "k\x00nul", Headers: map[string]string{"h": "v\x00"}, Payload: []byte{0, 1, 2}}))
		if rollback {
			require.NoError(t, tx.Rollback())
			assert.Zero(t, pending(t, conn), "a rolled-back transaction leaves no row")
		} else {
			require.NoError(t, tx.Commit())
			assert.EqualValues(t, 1, pending(t, conn), "a committed transaction leaves its row")
		}
	}
}

func TestUnpublishableRowGoesToTheDeadTableWithoutBlockingOthers(t *testing.T) {
	defer watchdog(t, time.Minute)()
	srv, conn := startDB(t)
	ctx := context.Background()
	b := memBus(t)

	before := write(t, conn, "orders", false, keyed(10, 2, "before")...)
	_, err := conn.Exec(ctx, `INSERT INTO bus_outbox (part, topic, id, key, payload) VALUES (0, 'no good', 'dead-1', '', ''),
		(0, 'orders', 'dead-2', 'k0', ''), (0, 'orders', 'dead-3', '', '')`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE bus_outbox SET headers = 'not json' WHERE id = 'dead-2'`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE bus_outbox SET payload = repeat('x', 1100000)::bytea WHERE id = 'dead-3'`)
	require.NoError(t, err)
	after := write(t, conn, "orders", false, keyed(10, 2, "after")...)

	events := make(chan observer.Event, 10)
	obs := observer.Func(func(_ context.Context, e observer.Event) {
		if e.Scope == observer.ScopeDeadLetter {
			events <- e
		}
	})
	c := collect(t, b, "orders")
	r, err := outbox.NewRelay(srv.URL(), b, outbox.WithPollInterval(50*time.Millisecond), outbox.WithObserver(obs))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.count() >= 20 && pending(t, conn) == 0 }, 20*time.Second, 10*time.Millisecond,
		"the rows after the dead ones are published")
	closeRelay(t, r)
	c.requireExactly(t, append(before, after...))

	dead, err := outbox.Dead(ctx, conn, 10)
	require.NoError(t, err)
	require.Len(t, dead, 3, "the three rows are in the dead table")
	reasons := map[string]string{}
	for _, d := range dead {
		reasons[d.ID] = d.Reason
	}
	assert.Contains(t, reasons["dead-1"], "invalid topic")
	assert.Contains(t, reasons["dead-2"], "headers do not decode")
	assert.Contains(t, reasons["dead-3"], "payload too large")
	require.Len(t, events, 3, "each dead row is reported to the observer")
	st, err := outbox.ReadStats(ctx, conn)
	require.NoError(t, err)
	assert.Equal(t, outbox.Stats{Dead: 3}, st)
	e := <-events
	assert.True(t, strings.Contains(e.Err.Error(), "bus_outbox_dead") && e.Code == "rejected", "the event says where the row went: %v", e)
}

func TestNewRelayRefusesBadOptionsBeforeIO(t *testing.T) {
	b := bus.New(nil)
	_, err := outbox.NewRelay("postgres://127.0.0.1:1/x", b, outbox.WithBatchSize(0))
	require.ErrorIs(t, err, bus.ErrInvalidOption)
	_, err = outbox.NewRelay("postgres://127.0.0.1:1/x", b, outbox.WithPollInterval(time.Microsecond))
	require.ErrorIs(t, err, bus.ErrInvalidOption)
	_, err = outbox.NewRelay("::not a url", b)
	require.ErrorIs(t, err, bus.ErrInvalidOption)
	_, err = outbox.NewRelay("postgres://127.0.0.1:1/x", nil)
	require.ErrorIs(t, err, bus.ErrInvalidOption)
}

// A dead row whose cause was fixed goes back to the outbox with Requeue
// and is published once, with its ID; a sequence number that is not dead
// is skipped, and an empty list is refused.
func TestRequeueMovesAFixedDeadRowBackAndTheRelayPublishesIt(t *testing.T) {
	defer watchdog(t, time.Minute)()
	srv, conn := startDB(t)
	ctx := context.Background()
	b := memBus(t)
	_, err := conn.Exec(ctx, `INSERT INTO bus_outbox (part, topic, id, key, headers, payload) VALUES (0, 'orders', 'mended', 'k0', 'not json', 'p')`)
	require.NoError(t, err)
	c := collect(t, b, "orders")
	r, err := outbox.NewRelay(srv.URL(), b, outbox.WithPollInterval(50*time.Millisecond))
	require.NoError(t, err)
	defer closeRelay(t, r)
	var dead []outbox.DeadRow
	require.Eventually(t, func() bool {
		dead, err = outbox.Dead(ctx, conn, 10)
		return err == nil && len(dead) == 1
	}, 20*time.Second, 10*time.Millisecond, "the row with bad headers goes to the dead table")
	assert.Zero(t, c.count(), "nothing published")

	_, err = outbox.Requeue(ctx, conn)
	require.Error(t, err, "no sequence numbers: refused")
	_, err = conn.Exec(ctx, `UPDATE bus_outbox_dead SET headers = NULL WHERE seq = $1`, dead[0].Seq)
	require.NoError(t, err, "mend the row")
	n, err := outbox.Requeue(ctx, outbox.SQL(sqlDB(t, srv.URL())), dead[0].Seq, dead[0].Seq+1000)
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the dead row moved back; the other number is not dead")
	require.Eventually(t, func() bool { return c.count() == 1 && pending(t, conn) == 0 }, 20*time.Second, 10*time.Millisecond,
		"the requeued row is published")
	c.requireExactly(t, []*bus.Message{{ID: "mended", Key: "k0", Payload: []byte("p")}})
	st, err := outbox.ReadStats(ctx, conn)
	require.NoError(t, err)
	assert.Equal(t, outbox.Stats{}, st, "nothing dead, nothing waiting")
}

// sqlDB opens url through database/sql, closed when the test ends.
func sqlDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/outbox"
)

func TestASecondWriterOfAKeyWaitsForTheFirstToCommit(t *testing.T) {
	defer watchdog(t, time.Minute)()
	srv, conn := startDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx1, err := conn.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, outbox.Publish(ctx, tx1, "orders", &bus.Message{Key: "o-1", Payload: []byte("first")}))

	conn2 := connect(t, srv.URL(), false)
	second := make(chan error, 1)
	go func() {
		second <- pgx.BeginFunc(ctx, conn2, func(tx pgx.Tx) error {
			return outbox.Publish(ctx, tx, "orders", &bus.Message{Key: "o-1", Payload: []byte("second")},
				&bus.Message{Key: "o-2", Payload: []byte("other key")})
		})
	}()
	watcher := connect(t, srv.URL(), false)
	require.Eventually(t, func() bool {
		var waiting int
		err := watcher.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&waiting)
		return err == nil && waiting == 1
	}, 10*time.Second, 5*time.Millisecond, "the second writer of o-1 waits for the first transaction's key lock")
	select {
	case err := <-second:
		t.Fatalf("the second writer returned (%v) before the first committed", err)
	default:
	}
	require.NoError(t, tx1.Commit(ctx))
	require.NoError(t, <-second, "the second writer goes on once the first committed")

	rows, err := conn.Query(ctx, "SELECT payload FROM bus_outbox WHERE key = 'o-1' ORDER BY seq")
	require.NoError(t, err)
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("first"), []byte("second")}, payloads, "seq order is commit order for the key")
}

func TestRelayWakesOnNotifyLongBeforeItsPoll(t *testing.T) {
	defer watchdog(t, time.Minute)()
	srv, conn := startDB(t)
	b := memBus(t)
	c := collect(t, b, "orders")
	r, err := outbox.NewRelay(srv.URL(), b, outbox.WithPollInterval(time.Minute))
	require.NoError(t, err)
	defer closeRelay(t, r)
	// After the first, the relay is waiting: only the commit's
	// notification can wake it within the poll interval.
	relayOneByOne(t, conn, c, "on its commit's notification, not a minute later")
}

// relayOneByOne commits three messages one at a time, each after the one
// before was relayed, and checks that each is relayed (how says by
// what) and that exactly they arrived.
func relayOneByOne(t *testing.T, conn *pgx.Conn, c *collector, how string) {
	t.Helper()
	var want []*bus.Message
	for i := range 3 {
		want = append(want, write(t, conn, "orders", false, keyed(1, 1, fmt.Sprint(i))...)...)
		require.Eventually(t, func() bool { return c.count() == i+1 }, 10*time.Second, 5*time.Millisecond,
			"message %d is relayed %s", i, how)
	}
	c.requireExactly(t, want)
}

func TestRelayPollsWhenNoNotificationComes(t *testing.T) {
	defer watchdog(t, time.Minute)()
	srv, conn := startDB(t)
	ctx := context.Background()
	_, err := conn.Exec(ctx, "ALTER TABLE bus_outbox DISABLE TRIGGER bus_outbox_notify")
	require.NoError(t, err)
	b := memBus(t)
	c := collect(t, b, "orders")
	r, err := outbox.NewRelay(srv.URL(), b, outbox.WithPollInterval(50*time.Millisecond))
	require.NoError(t, err)
	defer closeRelay(t, r)
	relayOneByOne(t, conn, c, "by the poll")
}

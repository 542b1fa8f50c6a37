package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/postgres"
)

// testPublishWaitsForNewGroup holds a topic's lock exclusively, as a new
// group does while it raises the topic's floor, and checks that a
// publish that waited for it writes at or above that floor (so the group
// receives it), though the publish's statement began before the floor
// was raised: it takes its transaction's id only once it holds the lock.
// It runs with the statement that may notify and with the lean one; the
// message with the caller's ID takes the statement with the dedup step
// in both.
func testPublishWaitsForNewGroup(t *testing.T, url string) {
	for _, c := range []struct {
		name  string
		force int
	}{{"Notifying", 1}, {"Lean", -1}} {
		t.Run(c.name, func(t *testing.T) { testPublishWaitsForNewGroupWith(t, url, c.force) })
	}
}

func testPublishWaitsForNewGroupWith(t *testing.T, url string, force int) {
	ctx := testCtx(t)
	be := openBackend(t, ctx, url)
	topic := fmt.Sprintf("pub.waits.%d", force+1)
	publish := func(payload string, callerID bool) error {
		m := &backend.Message{ID: payload, IDGenerated: !callerID, Payload: []byte(payload), PublishedAt: time.Now()}
		return be.Publish(ctx, topic, []*backend.Message{m})
	}
	require.NoError(t, publish("before", false))
	postgres.ForceClaims(be, force)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	lock := postgres.TopicLock(topic)
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, postgres.LockTopic, lock)
	require.NoError(t, err)

	// One message with an ID the bus assigns, one with the caller's (the
	// statement with the dedup step).
	done := make(chan error, 2)
	go func() { done <- publish("waited", false) }()
	go func() { done <- publish("waited, dedup", true) }()
	require.Eventually(t, func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
            AND classid = $1::bigint::oid AND objid = ($2::bigint & 4294967295)::oid`, postgres.LockTopic, lock).Scan(&n)
		return err == nil && n == 2
	}, 10*time.Second, 2*time.Millisecond, "both publishes wait for the topic's lock")
	// A transaction that commits now completes an id above any the waiting
	// publish could have taken, so the floor below is above such an id.
	other, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer other.Close(context.Background())
	_, err = other.Exec(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	var floor string
	require.NoError(t, tx.QueryRow(ctx, `UPDATE bus_topics SET floor = pg_snapshot_xmax(pg_current_snapshot())
    WHERE name = $1 RETURNING floor::text`, topic).Scan(&floor))
	require.NoError(t, tx.Commit(ctx))
	for range 2 {
		require.NoError(t, <-done, "a publish that waited")
	}

	ords := map[string]bool{}
	rows, err := conn.Query(ctx, `SELECT convert_from(payload, 'UTF8'), ord >= $2::text::xid8 FROM bus_messages WHERE topic = $1`, topic, floor)
	require.NoError(t, err)
	for rows.Next() {
		var payload string
		var above bool
		require.NoError(t, rows.Scan(&payload, &above))
		ords[payload] = above
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, map[string]bool{"before": false, "waited": true, "waited, dedup": true}, ords,
		"the message published before the floor was raised lies below it, those that waited at or above it")
}

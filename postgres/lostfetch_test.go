package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/postgres"
)

// lostFetchAckTimeout is the lease of the lost-fetch cases: far longer
// than lostFetchWithin, so a message that waits for its lease fails them.
const (
	lostFetchAckTimeout = 30 * time.Second
	lostFetchWithin     = 5 * time.Second
)

// testLostFetch makes a fetch whose reply is lost and that commits
// later: an admin transaction holds the group's row, a Receive's fetch
// waits for it at the server, its ctx ends (the client closes the
// connection; the statement stays queued at the server) and the admin
// transaction commits, so the fetch leases the message under its tag
// after the client gave up on it. AtClose: the member closes before the
// fetch commits; a member that joins after it committed gets the message
// within 5 s as its first attempt, not after the 30 s lease. NextReceive:
// the member's next Receive starts before the fetch commits; it gets the
// message within 5 s as its first attempt.
func testLostFetch(t *testing.T, rawURL string) {
	t.Run("AtClose", func(t *testing.T) { testLostFetchCase(t, rawURL, "lostfetch.close", true) })
	t.Run("NextReceive", func(t *testing.T) { testLostFetchCase(t, rawURL, "lostfetch.next", false) })
}

func testLostFetchCase(t *testing.T, rawURL, topic string, atClose bool) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	be := openBackend(t, ctx, rawURL)
	cfg := backend.SubscribeConfig{Group: "g", StartFrom: backend.StartOldest, AckTimeout: lostFetchAckTimeout, Observer: observer.Nop()}
	a, err := be.Subscribe(ctx, topic, cfg)
	require.NoError(t, err)
	defer a.Close()
	require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: "l-1", Payload: []byte("x")}}))

	admin, err := pgx.Connect(ctx, rawURL)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM bus_groups WHERE topic = $1 AND name = 'g' FOR UPDATE`, topic)
	require.NoError(t, err)

	rctx, rcancel := context.WithCancel(ctx)
	received := make(chan error, 1)
	go func() {
		_, err := a.Receive(rctx, 1)
		received <- err
	}()
	// The fetch waits for the group's row at the server.
	var lostPid int
	require.Eventually(t, func() bool {
		err := be.Pool().QueryRow(ctx, `SELECT pid FROM pg_stat_activity
    WHERE wait_event_type = 'Lock' AND query LIKE 'WITH g AS (%' AND pid <> $1`, admin.PgConn().PID()).Scan(&lostPid)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the fetch waits for the group's row")
	rcancel()
	select {
	case err := <-received:
		require.ErrorIs(t, err, context.Canceled, "the Receive whose ctx ended")
	case <-time.After(5 * time.Second):
		t.Fatal("Receive did not return within 5s of its ctx's end")
	}

	// gone reports whether the lost fetch's server process has ended:
	// its transaction committed (leasing the message) or rolled back.
	gone := func() bool {
		var ok bool
		err := be.Pool().QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, lostPid).Scan(&ok)
		return err == nil && ok
	}
	next := a
	if atClose {
		require.NoError(t, a.Close())
		// The lost fetch commits now, after the client gave up on it and
		// the member closed.
		require.NoError(t, tx.Commit(ctx))
		require.Eventually(t, gone, 10*time.Second, 5*time.Millisecond, "the lost fetch ends")
		next, err = be.Subscribe(ctx, topic, cfg)
		require.NoError(t, err)
		defer next.Close()
	}
	got := make(chan []*backend.Message, 1)
	failed := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(lostFetchWithin)
		for time.Now().Before(deadline) {
			msgs, err := next.Receive(ctx, 1)
			if err != nil {
				failed <- err
				return
			}
			if len(msgs) > 0 {
				got <- msgs
				return
			}
		}
		failed <- nil
	}()
	if !atClose {
		// The lost fetch commits now, after the next Receive started.
		require.NoError(t, tx.Commit(ctx))
	}
	select {
	case msgs := <-got:
		require.Len(t, msgs, 1)
		assert.Equal(t, "l-1", msgs[0].ID)
		assert.Equal(t, 1, msgs[0].Attempt, "no handler saw the lost delivery: not counted")
		require.NoError(t, next.Ack(ctx, []backend.AckID{msgs[0].AckID}))
	case err := <-failed:
		t.Fatalf("the message leased by the lost fetch was not handed out within %v (lease %v): %v", lostFetchWithin, lostFetchAckTimeout, err)
	}
}

// testLostFetchSparesOtherProcesses: the server process number of a lost
// fetch may belong to another process by the time a Receive ends it (the
// fetch's ended, and the number was given again). Ending a lost fetch
// whose number is that of an idle connection, or of one that runs
// another statement, opened after the loss leaves that connection alone
// and returns at once.
func testLostFetchSparesOtherProcesses(t *testing.T, rawURL string) {
	ctx := testCtx(t)
	be := openBackend(t, ctx, rawURL)
	lostAt := time.Now()
	idle, err := pgx.Connect(ctx, rawURL)
	require.NoError(t, err)
	defer idle.Close(context.Background())
	busy, err := pgx.Connect(ctx, rawURL)
	require.NoError(t, err)
	defer busy.Close(context.Background())

	slept := make(chan error, 1)
	go func() {
		_, err := busy.Exec(ctx, `SELECT pg_sleep(1)`)
		slept <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		err := idle.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active'`, busy.PgConn().PID()).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 2*time.Millisecond, "the other statement runs")

	for _, pid := range []uint32{idle.PgConn().PID(), busy.PgConn().PID()} {
		start := time.Now()
		require.NoError(t, postgres.EndLostFetch(ctx, be, pid, lostAt))
		assert.Less(t, time.Since(start), 500*time.Millisecond, "process %d runs no lost fetch: nothing to wait for", pid)
	}
	require.NoError(t, <-slept, "the other statement ran to its end")
	require.NoError(t, idle.Ping(ctx), "the idle connection is still there")
	require.NoError(t, busy.Ping(ctx), "the busy connection is still there")
}

// testLostFetchEndsIdleProcess: the server process of a lost fetch may be
// idle when a Receive or a Close ends it, the fetch the client sent
// before it gave up still unread (it commits once read). Ending a lost
// fetch of a connection opened before the loss ends that process, idle
// or not, and returns once it is gone: a give-back after it finds what
// the fetch leased.
func testLostFetchEndsIdleProcess(t *testing.T, rawURL string) {
	ctx := testCtx(t)
	be := openBackend(t, ctx, rawURL)
	idle, err := pgx.Connect(ctx, rawURL)
	require.NoError(t, err)
	defer idle.Close(context.Background())
	pid := idle.PgConn().PID()
	lostAt := time.Now().Add(time.Second)

	require.NoError(t, postgres.EndLostFetch(ctx, be, pid, lostAt))
	var gone bool
	require.NoError(t, be.Pool().QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&gone))
	assert.True(t, gone, "the idle process of the lost connection is gone")
	assert.Error(t, idle.Ping(ctx), "the lost connection is ended")
}

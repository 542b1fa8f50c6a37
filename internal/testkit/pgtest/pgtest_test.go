package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServerKeepsCommittedDataAcrossKillAndRestart(t *testing.T) {
	s := Start(t)
	require.NotContains(t, s.URL(), ":5432/", "a private server, never the shared one")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (42)")
	require.NoError(t, err)
	s.Kill()
	require.Error(t, conn.Ping(ctx), "the connection is gone after Kill")
	_ = conn.Close(ctx)
	s.Restart()
	conn, err = pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var v int
	require.NoError(t, conn.QueryRow(ctx, "SELECT v FROM t").Scan(&v))
	require.Equal(t, 42, v, "the committed row survives an immediate shutdown")
}

// TestPauseFreezesEveryBackend pauses the server with two connections
// open: a query on one of them and a new connection both fail with their
// ctx, so the backends are frozen and not only the postmaster. After
// Resume the other connection and a new one answer.
func TestPauseFreezesEveryBackend(t *testing.T) {
	s := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	busy, err := pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	defer busy.Close(context.Background())
	idle, err := pgx.Connect(ctx, s.URL())
	require.NoError(t, err)
	defer idle.Close(context.Background())

	s.Pause()
	resumed := false
	defer func() {
		if !resumed {
			s.Resume()
		}
	}()
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	var one int
	err = busy.QueryRow(short, "SELECT 1").Scan(&one)
	cancelShort()
	require.Error(t, err, "a query on an open connection gets no answer while the server is paused")
	short, cancelShort = context.WithTimeout(ctx, 300*time.Millisecond)
	c, err := pgx.Connect(short, s.URL())
	cancelShort()
	if err == nil {
		_ = c.Close(context.Background())
	}
	require.Error(t, err, "a new connection gets no answer while the server is paused")

	s.Resume()
	resumed = true
	require.NoError(t, idle.QueryRow(ctx, "SELECT 1").Scan(&one), "an open connection answers after Resume")
	c, err = pgx.Connect(ctx, s.URL())
	require.NoError(t, err, "a new connection is accepted after Resume")
	require.NoError(t, c.QueryRow(ctx, "SELECT 1").Scan(&one))
	_ = c.Close(ctx)
}

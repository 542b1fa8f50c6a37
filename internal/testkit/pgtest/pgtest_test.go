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

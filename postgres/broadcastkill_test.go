package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/broadcasttest"
)

// testBroadcastKilledProcess: three processes subscribe in broadcast and
// one is SIGKILLed mid-stream; the live ones get every message, and
// within 1.5 times the expiry the dead one's rows are gone from the
// tables: its bus_groups row (its cursor), its delivery rows and leases,
// its group lock.
func testBroadcastKilledProcess(t *testing.T, rawURL string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, rawURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	broadcasttest.Run(t, broadcasttest.Config{
		URL:    rawURL,
		Topic:  fmt.Sprintf("broadcast.kill.%d", time.Now().UnixNano()),
		Expiry: 3 * time.Second,
		Leftovers: func(ctx context.Context, topic, group string) ([]string, error) {
			return pgLeftovers(ctx, conn, topic, group)
		},
	})
}

// pgLeftovers lists the rows the tables hold of group on topic, and the
// delivery rows and leases of no group (a group's, left after its row).
func pgLeftovers(ctx context.Context, conn *pgx.Conn, topic, group string) ([]string, error) {
	var left []string
	for _, q := range []struct{ what, sql string }{
		{"bus_groups rows", `SELECT count(*) FROM bus_groups WHERE topic = $1 AND name = $2`},
		{"bus_deliveries rows", `SELECT count(*) FROM bus_deliveries d JOIN bus_groups g ON g.id = d.group_id WHERE g.topic = $1 AND g.name = $2`},
		{"bus_leases rows", `SELECT count(*) FROM bus_leases l JOIN bus_groups g ON g.id = l.group_id WHERE g.topic = $1 AND g.name = $2`},
		{"bus_locks rows", `SELECT count(*) FROM bus_locks WHERE topic = $1 AND grp = $2`},
		{"bus_members rows", `SELECT count(*) FROM bus_members WHERE topic = $1 AND grp = $2`},
		{"bus_deliveries rows of no group", `SELECT count(*) FROM bus_deliveries WHERE $1::text <> $2::text AND group_id NOT IN (SELECT id FROM bus_groups)`},
		{"bus_leases rows of no group", `SELECT count(*) FROM bus_leases WHERE $1::text <> $2::text AND group_id NOT IN (SELECT id FROM bus_groups)`},
	} {
		var n int
		if err := conn.QueryRow(ctx, q.sql, topic, group).Scan(&n); err != nil {
			return nil, fmt.Errorf("%s: %w", q.what, err)
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("%d %s", n, q.what))
		}
	}
	return left, nil
}

package postgres_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/postgres"
)

func TestOpenRefusesBadParametersBeforeIO(t *testing.T) {
	tests := []struct{ name, url string }{
		{"unknown retention", "postgres://u@127.0.0.1:1/db?retention=sometimes"},
		{"block over a second", "postgres://u@127.0.0.1:1/db?block=2s"},
		{"negative dedup window", "postgres://u@127.0.0.1:1/db?dedup_window=-1s"},
		{"payload over the cap", "postgres://u@127.0.0.1:1/db?max_payload=999999999999"},
		{"repeated parameter", "postgres://u@127.0.0.1:1/db?block=1s&block=2s"},
		{"long channel", "postgres://u@127.0.0.1:1/db?channel=" + strings.Repeat("c", 64)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			require.NoError(t, err)
			// Port 1 has no server: an error from I/O would not wrap
			// ErrInvalidOption.
			_, err = postgres.OpenURL(context.Background(), u)
			require.ErrorIs(t, err, bus.ErrInvalidOption)
		})
	}
	_, err := postgres.New(context.Background(), nil, nil)
	require.ErrorIs(t, err, bus.ErrInvalidOption, "a nil pool")
}

// testNewOverACallerPool opens a backend over a pool of the caller's on a
// database without the schema: with SkipMigrate a subscription fails for
// good (the table is missing); once Schema() is applied it works, and
// closing the backend leaves the caller's pool open.
func testNewOverACallerPool(t *testing.T, rawURL string) {
	ctx := testCtx(t)
	admin, err := pgxpool.New(ctx, rawURL)
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.Exec(ctx, "CREATE DATABASE callerpool")
	require.NoError(t, err)
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	u.Path = "/callerpool"
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	defer pool.Close()

	be, err := postgres.New(ctx, pool, &postgres.Options{SkipMigrate: true})
	require.NoError(t, err)
	b := bus.New(be, bus.WithObserver(observer.Nop()))
	_, err = b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup("g"))
	require.Error(t, err, "without the schema a subscription cannot start")
	require.NoError(t, b.Close(ctx))

	_, err = pool.Exec(ctx, postgres.Schema())
	require.NoError(t, err, "the schema applies with the caller's own tool")
	be, err = postgres.New(ctx, pool, nil)
	require.NoError(t, err, "New migrates, finding the schema in place")
	b = bus.New(be)
	got := make(chan string, 1)
	_, err = b.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
		got <- d.ID
		return nil
	}, bus.WithGroup("g"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1"}))
	select {
	case id := <-got:
		assert.Equal(t, "o-1", id)
	case <-ctx.Done():
		t.Fatal("no delivery over the caller's pool")
	}
	require.NoError(t, b.Close(ctx))
	require.NoError(t, pool.Ping(ctx), "closing the backend leaves the caller's pool open")
}

package postgres_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/postgres"
)

// insertCounter counts the statements that write to bus_messages.
type insertCounter struct{ n atomic.Int64 }

func (c *insertCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "INSERT INTO bus_messages") {
		c.n.Add(1)
	}
	return ctx
}

func (c *insertCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// testPublishEncodings publishes the same batches (keys, a header, a
// DeliverAt, caller-set IDs, an empty payload) through a Backend that
// encodes its inserts itself and through one over a caller pool with a
// tracer, whose inserts go through pgx so that the tracer sees them, and
// checks that both store the same messages.
func testPublishEncodings(t *testing.T, rawURL string) {
	ctx := testCtx(t)
	own := openBackend(t, ctx, rawURL)
	cfg, err := pgxpool.ParseConfig(rawURL)
	require.NoError(t, err)
	tracer := &insertCounter{}
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	traced, err := postgres.New(ctx, pool, nil)
	require.NoError(t, err)
	defer func() { _ = traced.Close() }()

	due := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	at := time.Date(2026, 11, 26, 22, 1, 2, 123456789, time.UTC)
	batch := func(prefix string) [][]*backend.Message {
		return [][]*backend.Message{
			{{ID: prefix + "plain", IDGenerated: true, Payload: []byte("p"), PublishedAt: at}},
			{{ID: prefix + "keyed", IDGenerated: true, Key: "k ✓", Payload: []byte{}, PublishedAt: at},
				{ID: prefix + "headers", IDGenerated: true, Headers: map[string]string{"h ✓": "ü"}, Payload: []byte{0, 1}, PublishedAt: at}},
			{{ID: prefix + "due", IDGenerated: true, Headers: map[string]string{backend.HeaderDeliverAt: strconv.FormatInt(due.UnixMilli(), 10)}, Payload: []byte("d"), PublishedAt: at}},
			{{ID: prefix + "caller", Payload: []byte("c"), PublishedAt: at}, {ID: prefix + "caller", Payload: []byte("c again"), PublishedAt: at}},
		}
	}
	type row struct {
		ID, Key      string
		Payload      []byte
		Headers      []byte
		PublishedAt  time.Time
		DueLater     bool
		VisibleAtDue bool
	}
	stored := func(topic string) []row {
		rows, err := pool.Query(ctx, `SELECT id, convert_from(key, 'UTF8'), payload, headers, published_at, visible_at > now() + interval '30 minutes',
            visible_at = $2 FROM bus_messages WHERE topic = $1 ORDER BY seq`, topic, due)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		require.NoError(t, err)
		return got
	}
	for _, c := range []struct {
		name string
		be   *postgres.Backend
	}{{"own", own}, {"traced", traced}} {
		for _, force := range []int{1, -1} {
			postgres.ForceClaims(c.be, force)
			for _, msgs := range batch("") {
				require.NoError(t, c.be.Publish(ctx, "encodings."+c.name, msgs), c.name)
			}
		}
	}
	assert.Equal(t, int64(len(batch(""))*2), tracer.n.Load(), "the traced Backend's inserts go through pgx")
	mine, theirs := stored("encodings.own"), stored("encodings.traced")
	require.Len(t, mine, 9, "each batch twice; the caller's ID once")
	assert.Equal(t, theirs, mine, "both encodings store the same messages")
	// One header per message: the stored bytes of several follow the
	// map's order.
	for _, r := range mine {
		assert.True(t, r.PublishedAt.Equal(at.Truncate(time.Microsecond)), "%s: published at %v", r.ID, r.PublishedAt)
		assert.Equal(t, r.ID == "due", r.DueLater, "%s: due later", r.ID)
		assert.Equal(t, r.ID == "due", r.VisibleAtDue, "%s: visible at its DeliverAt", r.ID)
	}
}

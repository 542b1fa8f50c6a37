package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/outbox"
)

// TestDashboardOutboxPanelInABrowser checks in headless Chromium that the
// outbox panel of bus ui --db shows the rows waiting and the dead rows
// with their reasons.
func TestDashboardOutboxPanelInABrowser(t *testing.T) {
	browser := chromiumOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := pgtest.Start(t).URL()
	conn, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.NoError(t, outbox.Migrate(ctx, conn))
	require.NoError(t, outbox.Publish(ctx, conn, "orders", &bus.Message{Payload: []byte("waiting")}))
	_, err = conn.Exec(ctx, `INSERT INTO bus_outbox_dead (seq, part, topic, id, key, payload, created_at, reason)
		VALUES (7, 0, 'no good', 'bad-7', '', '', now(), 'invalid topic "no good"')`)
	require.NoError(t, err)
	b, err := bus.Open(ctx, "mem://")
	require.NoError(t, err)
	defer b.Close(context.Background())
	base := serveDashboard(t, ctx, b, uiConfig{interval: 200 * time.Millisecond, log: slog.New(slog.NewTextHandler(io.Discard, nil)), outboxDB: db})

	var stats string
	var row []string
	require.NoError(t, chromedp.Run(newBrowser(t, ctx, browser),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`#outbox-dead tbody tr`),
		chromedp.Text(`#outbox-stats`, &stats),
		chromedp.Evaluate(`[...document.querySelectorAll("#outbox-dead tbody tr td")].map((td) => td.textContent)`, &row),
	), "load the dashboard")
	assert.Contains(t, stats, "1 pending", "the panel counts the row waiting for a relay")
	assert.Contains(t, stats, "1 dead")
	require.Len(t, row, 5, "one dead row: seq, topic, id, failed at, reason")
	assert.Equal(t, []string{"7", "no good", "bad-7"}, row[:3])
	assert.Equal(t, `invalid topic "no good"`, row[4], "the dead row's reason")
}

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/lifecycle"
)

// TestDashboardHistoryInABrowser runs two messages into the dead-letter
// topic on a bus with lifecycle events, replays one, and checks in
// headless Chromium that a dead letter's history link shows its timeline
// and that the search box finds the replayed one.
func TestDashboardHistoryInABrowser(t *testing.T) {
	browser := chromiumOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const url = "mem://dashboard-history-test"
	b, err := bus.Open(ctx, url, bus.WithEvents(defaultEventsTopic))
	require.NoError(t, err)
	defer b.Close(context.Background())
	in, closeIn, err := openInspector(ctx, url)
	require.NoError(t, err)
	defer closeIn()
	var ok atomic.Bool
	_, err = b.Subscribe(ctx, "payments", func(ctx context.Context, d *bus.Delivery) error {
		if !ok.Load() {
			return bus.Reject(errors.New("card declined"))
		}
		return nil
	}, bus.WithGroup("charger"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "payments", &bus.Message{ID: "pay-1"}, &bus.Message{ID: "pay-2", Key: "card-9"}))
	require.Eventually(t, func() bool {
		dls, err := b.DeadLetters(ctx, "payments.dlq", 0)
		return err == nil && len(dls) == 2
	}, 10*time.Second, 10*time.Millisecond)
	ok.Store(true)
	n, err := b.ReplayDeadLetters(ctx, "payments.dlq", "pay-2")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Eventually(t, func() bool {
		h, err := lifecycle.Read(ctx, in, defaultEventsTopic, lifecycle.Query{ID: "pay-2"})
		return err == nil && len(h.Entries) == 6
	}, 20*time.Second, 10*time.Millisecond, "the events of pay-2 are written")

	base := serveDashboard(t, ctx, b, uiConfig{interval: 200 * time.Millisecond, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		inspector: in, events: defaultEventsTopic})
	cctx := newBrowser(t, ctx, browser)

	const kinds = `[...document.querySelectorAll("#timeline tbody tr")].map((r) => r.dataset.kind)`
	var fromLink, fromSearch, fromKey []string
	var status, detail, missing string
	require.NoError(t, chromedp.Run(cctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`#dlq tr[data-id="pay-1"] a.history`),
		chromedp.Click(`#dlq tr[data-id="pay-1"] a.history`),
		chromedp.WaitVisible(`#timeline tr[data-kind="dead_lettered"]`),
		chromedp.Evaluate(kinds, &fromLink),
		chromedp.Text(`#timeline tr[data-kind="dead_lettered"] td.detail`, &detail),
		chromedp.SetValue(`#history-q`, "pay-2"),
		chromedp.Click(`#history-form button[type="submit"]`),
		chromedp.WaitVisible(`#timeline tr[data-kind="succeeded"]`),
		chromedp.Evaluate(kinds, &fromSearch),
		chromedp.Text(`#history-status`, &status),
		chromedp.SetValue(`#history-q`, "card-9"),
		chromedp.Click(`#history-form button[type="submit"]`),
		chromedp.Poll(`location.hash === "#history=card-9" && document.querySelector("#history-status").textContent.includes("card-9")`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Evaluate(kinds, &fromKey),
		chromedp.SetValue(`#history-q`, "nobody"),
		chromedp.Click(`#history-form button[type="submit"]`),
		chromedp.Poll(`document.querySelector("#history-status").textContent.includes("nobody")`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Text(`#history-status`, &missing),
	), "open the history of a dead letter from its link, then search")
	assert.Equal(t, []string{"received", "failed", "dead_lettered"}, fromLink, "the dead letter's link shows its timeline")
	assert.Contains(t, detail, "code rejected", "with the dead-letter code")
	assert.Contains(t, detail, "held there now", "and that it is still held")
	want := []string{"received", "failed", "dead_lettered", "replayed", "received", "succeeded"}
	assert.Equal(t, want, fromSearch, "the search box shows the timeline of a replayed message")
	assert.Contains(t, status, "6 step(s) of pay-2")
	assert.Equal(t, want, fromKey, "a key finds the messages that carry it")
	assert.Contains(t, missing, "nothing about nobody", "an unknown message says so")
}

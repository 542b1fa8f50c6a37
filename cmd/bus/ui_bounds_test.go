package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/internal/testkit/autoscaletest"
)

// TestDashboardShowsTheBoundOfAutoscaledMembers scales a member up and
// down with lifecycle events on, and checks that the dashboard's state,
// and in headless Chromium (when installed) its groups table, show the
// member's last bound.
func TestDashboardShowsTheBoundOfAutoscaledMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const url = "mem://dashboard-bounds-test"
	rec := &autoscaletest.Recorder{}
	b, err := bus.Open(ctx, url, bus.WithObserver(rec), bus.WithEvents(defaultEventsTopic))
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close(context.Background())) }()
	autoscaletest.Run(t, b, rec, "orders")
	in, closeIn, err := openInspector(ctx, url)
	require.NoError(t, err)
	defer closeIn()

	base := serveDashboard(t, ctx, b, uiConfig{interval: 100 * time.Millisecond, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		inspector: in, events: defaultEventsTopic})
	var bounds []lifecycle.Bound
	require.Eventually(t, func() bool {
		bounds = stateBounds(t, base, "orders", "scaled")
		return len(bounds) == 1 && bounds[0].Bound == 1
	}, 20*time.Second, 50*time.Millisecond, "the state carries the member's last bound: %+v", bounds)
	assert.Equal(t, "drained", bounds[0].Reason)

	browser := chromiumPath()
	if browser == "" {
		t.Log("Chromium is not installed: the groups table was not checked in a browser")
		return
	}
	var cell, title string
	require.NoError(t, chromedp.Run(newBrowser(t, ctx, browser),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`#groups tr[data-group="scaled"] td.bound`),
		chromedp.Text(`#groups tr[data-group="scaled"] td.bound`, &cell),
		chromedp.AttributeValue(`#groups tr[data-group="scaled"] td.bound`, "title", &title, nil),
	), "load the dashboard")
	assert.Equal(t, "1", cell, "the groups table shows the member's bound")
	assert.Contains(t, title, bounds[0].Member+": 1 (drained", "its tooltip names the member and the reason")
}

// stateBounds reads the dashboard's state and returns the bounds of group
// on topic.
func stateBounds(t *testing.T, base, topic, group string) []lifecycle.Bound {
	resp, err := http.Get(base + "/api/state")
	require.NoError(t, err)
	defer resp.Body.Close()
	var st struct {
		Snapshot *snapshot `json:"snapshot"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	if st.Snapshot == nil {
		return nil
	}
	for _, tp := range st.Snapshot.Topics {
		if tp.Name == topic {
			return tp.Bounds[group]
		}
	}
	return nil
}

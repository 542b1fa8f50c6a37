package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

// TestDashboardInABrowser seeds a broker with topics, a lagging group and
// dead letters, loads the dashboard in headless Chromium, checks the
// tables and the chart, replays a dead letter with the button, and saves
// a screenshot.
func TestDashboardInABrowser(t *testing.T) {
	browser := chromiumOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const url = "mem://dashboard-test"
	b, err := bus.Open(ctx, url)
	require.NoError(t, err)
	defer b.Close(context.Background())

	// A lagging group: it takes 3 of 10 messages and holds them.
	release := make(chan struct{})
	defer close(release)
	_, err = b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, bus.WithGroup("billing"), bus.WithMaxInFlight(3))
	require.NoError(t, err)
	for range 10 {
		require.NoError(t, b.Publish(ctx, "orders", &bus.Message{Payload: []byte(`{"total":42}`)}))
	}
	// Dead letters: payments rejects until the replay.
	var ok atomic.Bool
	replayed := make(chan string, 4)
	_, err = b.Subscribe(ctx, "payments", func(ctx context.Context, d *bus.Delivery) error {
		if !ok.Load() {
			return bus.Reject(errors.New("card declined"))
		}
		replayed <- d.ID
		return nil
	}, bus.WithGroup("charger"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "payments",
		&bus.Message{ID: "pay-1", Payload: []byte("<script>alert(1)</script>")},
		&bus.Message{ID: "pay-2", Payload: []byte("4111")}))
	require.Eventually(t, func() bool {
		dls, err := b.DeadLetters(ctx, "payments.dlq", 0)
		return err == nil && len(dls) == 2
	}, 10*time.Second, 10*time.Millisecond)

	var log syncBuffer
	base := serveDashboard(t, ctx, b, uiConfig{allowWrites: true, interval: 200 * time.Millisecond, log: slog.New(slog.NewTextHandler(&log, nil))})
	cctx := newBrowser(t, ctx, browser) // it accepts the replay button's confirmation

	var lag, pending, messages, alertText string
	var points int
	require.NoError(t, chromedp.Run(cctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`#groups tr[data-group="billing"] td.lag`),
		chromedp.Text(`#groups tr[data-group="billing"] td.lag`, &lag),
		chromedp.Text(`#groups tr[data-group="billing"] td.pending`, &pending),
		chromedp.Text(`#topics tr[data-topic="orders"] td.messages`, &messages),
		chromedp.WaitVisible(`#dlq tr[data-id="pay-1"]`),
		chromedp.Click(`#dlq tr[data-id="pay-1"]`),
		chromedp.WaitVisible(`#detail`),
		chromedp.Text(`#detail-payload`, &alertText),
		chromedp.Poll(`window.busChartPoints >= 2`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Evaluate(`window.busChartPoints`, &points),
	), "load the dashboard")
	assert.Equal(t, "7", lag, "the group shows 7 messages not yet delivered")
	assert.Equal(t, "3", pending, "and 3 in flight")
	assert.Equal(t, "10", messages, "the topic retains 10 messages")
	assert.Equal(t, "<script>alert(1)</script>", alertText, "the payload preview is shown as text, not run")
	assert.GreaterOrEqual(t, points, 2, "the chart plots samples")

	ok.Store(true)
	var result string
	var detailHidden bool
	var ticks []string
	require.NoError(t, chromedp.Run(cctx,
		chromedp.Click(`#dlq tr[data-id="pay-2"]`),
		chromedp.WaitVisible(`#detail`),
		chromedp.Click(`#dlq tr[data-id="pay-2"] button.replay`),
		chromedp.WaitNotPresent(`#dlq tr[data-id="pay-2"]`),
		// Several refreshes later the result is still on screen.
		chromedp.Poll(`window.busChartPoints >= 8`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Text(`#result-text`, &result),
		chromedp.Evaluate(`document.querySelector("#detail").hidden`, &detailHidden),
		chromedp.Evaluate(`window.busChartTicks`, &ticks),
	), "replay pay-2 with its button")
	assert.Contains(t, result, "replay pay-2: 1 done", "the replay's result stays visible across refreshes")
	assert.True(t, detailHidden, "the detail panel lets go of the replayed message")
	assert.Equal(t, []string{"0", "2", "4", "6", "8"}, ticks, "the chart's axis shows round, distinct values (lag 7)")
	assert.Contains(t, log.String(), "bus ui: replay", "the replay is logged")
	assert.Contains(t, log.String(), "done=1", "with its count")
	select {
	case id := <-replayed:
		assert.Equal(t, "pay-2", id, "the replayed message arrives on its original topic")
	case <-ctx.Done():
		t.Fatal("the replayed message did not arrive")
	}
	dls, err := b.DeadLetters(ctx, "payments.dlq", 0)
	require.NoError(t, err)
	require.Len(t, dls, 1, "the replayed message left the dead-letter topic")
	assert.Equal(t, "pay-1", dls[0].ID)

	var shot []byte
	require.NoError(t, chromedp.Run(cctx, chromedp.FullScreenshot(&shot, 100)))
	dir := os.Getenv("BUS_UI_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "dashboard.png")
	require.NoError(t, os.WriteFile(path, shot, 0o644))
	assert.True(t, strings.HasPrefix(string(shot[:8]), "\x89PNG"), "a PNG screenshot")
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))
}

func TestDashboardRefusesWritesWithoutFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, "mem://")
	require.NoError(t, err)
	defer b.Close(ctx)
	g, err := newGuard(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, "")
	require.NoError(t, err)
	u := &uiServer{b: b, guard: g, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptestServer(t, u)
	resp, err := srv.Client().Post(srv.URL+"/api/dlq/purge", "application/json", strings.NewReader(`{"topic":"x.dlq","all":true}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 403, resp.StatusCode, "replay and purge need --allow-writes")
}

func httptestServer(t *testing.T, u *uiServer) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(u.routes())
	t.Cleanup(srv.Close)
	return srv
}

// The publish rate is the growth of the broker's count of messages that
// entered the topic, not of what it retains: retention that removes
// messages does not hide publishes, and a count the broker does not keep
// makes the rate unknown.
func TestPublishRateComesFromThePublishedCount(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	topic := func(name string, retained, published bus.Figure) topicStat {
		return topicStat{TopicInfo: bus.TopicInfo{Name: name, Messages: retained, Published: published}, Groups: []bus.GroupInfo{}}
	}
	prev := &snapshot{At: at, Topics: []topicStat{topic("orders", 61, 1000), topic("pg", 10, bus.Figure(-1))}}
	cur := &snapshot{At: at.Add(2 * time.Second), Topics: []topicStat{topic("orders", 0, 1400), topic("pg", 0, bus.Figure(-1))}}
	cur.withRates(prev)
	require.NotNil(t, cur.Topics[0].PublishRate, "a rate from the published counts")
	assert.InDelta(t, 200.0, *cur.Topics[0].PublishRate, 0.001, "400 published in 2 s, though the retained count fell to 0")
	assert.Nil(t, cur.Topics[1].PublishRate, "no published count: the rate is unknown")
	var out strings.Builder
	writeSnapshot(&out, cur, prev)
	assert.Contains(t, out.String(), "200.0", "the text shows the rate")
	assert.Regexp(t, `(?m)^pg\s+0\s+unknown`, out.String(), "and unknown where the broker keeps no count")
}

// The dead-letter list comes in pages: offset and limit, and whether a
// next page has some.
func TestDashboardPagesTheDeadLetters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := seedPagedDeadLetters(t, ctx, "pay", 120)
	g, err := newGuard(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, "")
	require.NoError(t, err)
	u := &uiServer{b: b, guard: g, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptestServer(t, u)
	get := func(query string) (int, uiDeadLetterPage) {
		resp, err := srv.Client().Get(srv.URL + "/api/dlq?" + query)
		require.NoError(t, err)
		defer resp.Body.Close()
		var p uiDeadLetterPage
		if resp.StatusCode == 200 {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
		}
		return resp.StatusCode, p
	}
	code, p := get("topic=pay.dlq")
	require.Equal(t, 200, code)
	assert.Len(t, p.Items, dlqPageSize, "the first page holds the default page size")
	assert.Equal(t, "pay-000", p.Items[0].ID, "oldest first")
	assert.True(t, p.More, "more pages follow")
	code, p = get("topic=pay.dlq&offset=50&limit=50")
	require.Equal(t, 200, code)
	assert.Equal(t, "pay-050", p.Items[0].ID, "the second page starts after the first")
	assert.True(t, p.More)
	code, p = get("topic=pay.dlq&offset=100&limit=50")
	require.Equal(t, 200, code)
	assert.Len(t, p.Items, 20, "the last page holds the rest")
	assert.Equal(t, "pay-119", p.Items[19].ID)
	assert.False(t, p.More, "nothing after the last page")
	code, p = get("topic=pay.dlq&offset=200")
	require.Equal(t, 200, code)
	assert.Empty(t, p.Items, "past the end: an empty page")
	for _, bad := range []string{"offset=-1", "offset=x", "limit=0", "limit=501", "offset=100001"} {
		code, _ := get("topic=pay.dlq&" + bad)
		assert.Equal(t, 400, code, "%s is refused", bad)
	}
}

// seedPagedDeadLetters opens a private mem bus whose topic rejects its n
// messages, topic-000 and on, into topic.dlq.
func seedPagedDeadLetters(t *testing.T, ctx context.Context, topic string, n int) *bus.Bus {
	t.Helper()
	b, err := bus.Open(ctx, "mem://")
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	_, err = b.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
		return bus.Reject(errors.New("declined"))
	}, bus.WithGroup("g"), bus.WithMaxInFlight(1)) // dead-lettered in order
	require.NoError(t, err)
	msgs := make([]*bus.Message, n)
	for i := range msgs {
		msgs[i] = &bus.Message{ID: fmt.Sprintf("%s-%03d", topic, i), Payload: []byte("x")}
	}
	require.NoError(t, b.Publish(ctx, topic, msgs...))
	require.Eventually(t, func() bool {
		dls, err := b.DeadLetters(ctx, topic+".dlq", 0)
		return err == nil && len(dls) == n
	}, 20*time.Second, 10*time.Millisecond, "the %d messages are dead-lettered", n)
	return b
}

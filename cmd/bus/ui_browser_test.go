package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

// chromiumPath finds the browser scripts/setup.sh installs.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// chromiumOrSkip returns chromiumPath, or skips the test when Chromium is
// not installed.
func chromiumOrSkip(t *testing.T) string {
	t.Helper()
	browser := chromiumPath()
	if browser == "" {
		t.Skip("Chromium is not installed (scripts/setup.sh installs Debian's chromium package); the dashboard's browser test needs it")
	}
	return browser
}

// serveDashboard serves the dashboard of b with cfg on a free loopback
// port until the test ends, and returns its base URL.
func serveDashboard(t *testing.T, ctx context.Context, b *bus.Bus, cfg uiConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	uiCtx, stopUI := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- serveUI(uiCtx, ln, b, cfg) }()
	t.Cleanup(func() {
		stopUI()
		require.NoError(t, <-served, "the dashboard stops cleanly")
	})
	return "http://" + ln.Addr().String()
}

// newBrowser starts headless Chromium from path, closed when the test
// ends, and returns its ctx for chromedp.Run. It accepts the dashboard's
// confirmation dialogs.
func newBrowser(t *testing.T, ctx context.Context, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Headless, chromedp.WindowSize(1200, 1500))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	cctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	chromedp.ListenTarget(cctx, func(ev any) {
		if _, isDialog := ev.(*page.EventJavascriptDialogOpening); isDialog {
			go func() { _ = chromedp.Run(cctx, page.HandleJavaScriptDialog(true)) }()
		}
	})
	return cctx
}

// TestDashboardPagerRateAndAlignmentInABrowser: the dead-letter list
// pages with Next and Previous, the publish rate is a number on a broker
// that counts publishes, and numeric columns are right-aligned under
// right-aligned headers.
func TestDashboardPagerRateAndAlignmentInABrowser(t *testing.T) {
	browser := chromiumOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := seedPagedDeadLetters(t, ctx, "pay", 120)
	base := serveDashboard(t, ctx, b, uiConfig{interval: 200 * time.Millisecond, log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	cctx := newBrowser(t, ctx, browser)

	var first, pageText, prevDisabled, nextDisabled, lastPage, rate string
	var aligned []string
	require.NoError(t, chromedp.Run(cctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`#dlq tr[data-id="pay-000"]`),
		chromedp.Text(`#dlq-page`, &pageText),
		chromedp.Evaluate(`String(document.querySelector("#dlq-prev").disabled)`, &prevDisabled),
		chromedp.Click(`#dlq-next`),
		chromedp.WaitVisible(`#dlq tr[data-id="pay-050"]`),
		chromedp.Text(`#dlq tbody tr:first-child td:first-child`, &first),
		chromedp.Click(`#dlq-next`),
		chromedp.WaitVisible(`#dlq tr[data-id="pay-119"]`),
		chromedp.Text(`#dlq-page`, &lastPage),
		chromedp.Evaluate(`String(document.querySelector("#dlq-next").disabled)`, &nextDisabled),
		chromedp.Click(`#dlq-prev`),
		chromedp.WaitVisible(`#dlq tr[data-id="pay-050"]`),
		chromedp.Poll(`/^[0-9.]+$/.test(document.querySelector('#topics tr[data-topic="pay"] td.rate').textContent)`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Text(`#topics tr[data-topic="pay"] td.rate`, &rate),
		chromedp.Evaluate(`[...document.querySelectorAll("#topics thead th, #groups thead th")].map((th, i) => {
			const table = th.closest("table");
			const td = table.querySelector("tbody tr td:nth-child(" + (th.cellIndex + 1) + ")");
			return th.textContent + ":" + getComputedStyle(th).textAlign + "/" + (td ? getComputedStyle(td).textAlign : "-");
		})`, &aligned),
	), "page through the dead letters")
	assert.Equal(t, "1–50 of more", pageText, "the first page says where it is")
	assert.Equal(t, "true", prevDisabled, "no page before the first")
	assert.Equal(t, "pay-050", first, "Next shows the second page")
	assert.Equal(t, "101–120", lastPage, "the last page")
	assert.Equal(t, "true", nextDisabled, "no page after the last")
	assert.Regexp(t, `^[0-9]+\.[0-9]$`, rate, "mem counts publishes: the rate is a number")
	for _, a := range aligned {
		header, cells, _ := strings.Cut(a, ":")
		th, td, _ := strings.Cut(cells, "/")
		if td != "-" {
			assert.Equal(t, td, th, "column %q: the header is aligned as its cells", header)
		}
	}
	assert.Contains(t, aligned, "messages:right/right", "numbers are right-aligned under right-aligned headers")
}

package main

import (
	"context"
	"net"
	"os/exec"
	"testing"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
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

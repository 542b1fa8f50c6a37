package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// guardedUI serves a dashboard with writes enabled over a bus with two dead
// letters on payments.dlq, and returns its server, bus and log.
func guardedUI(t *testing.T, auth string) (*httptest.Server, *uiServer, *bus.Bus, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	b, err := bus.Open(ctx, "mem://", bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	_, err = b.Subscribe(ctx, "payments", func(context.Context, *bus.Delivery) error {
		return bus.Reject(errors.New("declined"))
	})
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "payments", &bus.Message{ID: "p-1"}, &bus.Message{ID: "p-2"}))
	require.Eventually(t, func() bool {
		dls, err := b.DeadLetters(ctx, "payments.dlq", 0)
		return err == nil && len(dls) == 2
	}, 10*time.Second, 5*time.Millisecond, "two dead letters")
	g, err := newGuard(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, auth)
	require.NoError(t, err)
	log := &syncBuffer{}
	u := &uiServer{b: b, allowWrites: true, guard: g, log: slog.New(slog.NewTextHandler(log, nil))}
	srv := httptestServer(t, u)
	srv.Client().Timeout = 10 * time.Second // a hung request fails the test with a message
	return srv, u, b, log
}

// post sends a purge of all payments.dlq with the headers given.
func post(t *testing.T, srv *httptest.Server, host string, headers map[string]string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/dlq/purge", strings.NewReader(body))
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

const purgeAll = `{"topic":"payments.dlq","all":true,"confirm":"payments.dlq"}`

func TestDashboardRefusesWritesItsOwnPageDidNotMake(t *testing.T) {
	srv, u, b, log := guardedUI(t, "")
	good := func() map[string]string {
		return map[string]string{"Content-Type": "application/json", tokenHeader: u.guard.token}
	}
	tests := []struct {
		name   string
		host   string
		change func(h map[string]string)
		body   string
		want   int
	}{
		{"foreign origin", "", func(h map[string]string) { h["Origin"] = "http://evil.example" }, purgeAll, http.StatusForbidden},
		{"cross-site fetch", "", func(h map[string]string) { h["Sec-Fetch-Site"] = "cross-site" }, purgeAll, http.StatusForbidden},
		{"no token", "", func(h map[string]string) { delete(h, tokenHeader) }, purgeAll, http.StatusForbidden},
		{"wrong token", "", func(h map[string]string) { h[tokenHeader] = strings.Repeat("0", 64) }, purgeAll, http.StatusForbidden},
		{"text/plain like a form", "", func(h map[string]string) { h["Content-Type"] = "text/plain" }, purgeAll, http.StatusForbidden},
		{"rebinding host", "evil.example:8080", func(map[string]string) {}, purgeAll, http.StatusForbidden},
		{"purge all without confirm", "", func(map[string]string) {}, `{"topic":"payments.dlq","all":true}`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		h := good()
		tt.change(h)
		resp := post(t, srv, tt.host, h, tt.body)
		assert.Equal(t, tt.want, resp.StatusCode, "%s is refused", tt.name)
	}
	dls, err := b.DeadLetters(context.Background(), "payments.dlq", 0)
	require.NoError(t, err)
	assert.Len(t, dls, 2, "no refused request purged anything")
	assert.Contains(t, log.String(), "write refused", "refusals are logged")

	h := good()
	h["Origin"] = srv.URL // the dashboard's own page
	resp := post(t, srv, "", h, purgeAll)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the dashboard's own page may purge")
	var res struct{ Done int }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&res))
	assert.Equal(t, 2, res.Done, "both dead letters purged")
	assert.Contains(t, log.String(), "bus ui: purge", "the purge is logged")
	assert.Contains(t, log.String(), "done=2", "with its count")
}

func TestDashboardStateGivesTheTokenOnlyWithWrites(t *testing.T) {
	srv, u, _, _ := guardedUI(t, "")
	var st map[string]any
	resp, err := srv.Client().Get(srv.URL + "/api/state")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	assert.Equal(t, u.guard.token, st["token"], "the page reads its write token from /api/state")
	u.allowWrites = false
	resp2, err := srv.Client().Get(srv.URL + "/api/state")
	require.NoError(t, err)
	defer resp2.Body.Close()
	st = nil
	require.NoError(t, json.NewDecoder(resp2.Body).Decode(&st))
	assert.NotContains(t, st, "token", "no token without --allow-writes")
}

func TestDashboardBasicAuth(t *testing.T) {
	srv, _, _, _ := guardedUI(t, "ops:s3cret")
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/state", nil)
	require.NoError(t, err)
	req.Host = "dashboard.internal:8080" // with --auth any host name may serve
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no credentials")
	req.SetBasicAuth("ops", "wrong")
	resp, err = srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "wrong password")
	req.SetBasicAuth("ops", "s3cret")
	resp, err = srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the right credentials")
}

func TestDashboardRefusesToListenBeyondLoopbackWithoutAuth(t *testing.T) {
	var stdout, stderr strings.Builder
	code := run(context.Background(), []string{"ui", "--listen", "0.0.0.0:0"}, strings.NewReader(""), &stdout, &stderr)
	assert.Equal(t, exitUsage, code, "refused")
	assert.Contains(t, stderr.String(), "--auth", "the error says what to add")
	_, err := newGuard(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, "nopassword")
	assert.Error(t, err, "--auth wants user:password")
}

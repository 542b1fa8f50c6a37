package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// bus keys list shows a held key with its parked messages, bus groups
// counts it, and bus keys release lets the parked messages be handled,
// in order, the head staying a dead letter (code released).
func TestKeysCommands(t *testing.T) {
	const url, topic = "mem://keys-cli-test", "ledger"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, url, bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	defer func() { _ = b.Close(ctx) }()
	var mu sync.Mutex
	var handled []string
	_, err = b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "debit 70" {
			return bus.Reject(errors.New("account service down"))
		}
		mu.Lock()
		handled = append(handled, string(d.Payload))
		mu.Unlock()
		return nil
	}, bus.WithGroup("billing"), bus.WithKeyOrdering(), bus.WithKeyFailure(bus.KeyHold))
	require.NoError(t, err)
	for _, p := range []string{"credit 100", "debit 70", "debit 20", "credit 5"} {
		require.NoError(t, b.Publish(ctx, topic, &bus.Message{Key: "acct-7", Payload: []byte(p)}))
	}
	require.Eventually(t, func() bool {
		keys, err := b.HeldKeys(ctx, topic+".dlq")
		return err == nil && len(keys) == 1 && keys[0].Parked == 2
	}, 20*time.Second, 10*time.Millisecond, "acct-7 held, 2 parked")

	code, stdout, stderr := runCLI(t, "", "keys", "list", "--url", url, "--topic", topic, "--json")
	require.Equal(t, exitOK, code, stderr)
	var keys []heldKeyJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &keys), stdout)
	require.Len(t, keys, 1)
	assert.Equal(t, "acct-7", keys[0].Key)
	assert.Equal(t, "billing", keys[0].Group)
	assert.Equal(t, 2, keys[0].Parked)
	code, stdout, stderr = runCLI(t, "", "keys", "list", "--url", url, "--topic", topic)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "acct-7")

	code, stdout, stderr = runCLI(t, "", "groups", "--url", url, "--topic", topic)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "HELD KEYS")
	code, stdout, stderr = runCLI(t, "", "groups", "--url", url, "--topic", topic, "--json")
	require.Equal(t, exitOK, code, stderr)
	var rows []groupRow
	require.NoError(t, json.Unmarshal([]byte(stdout), &rows), stdout)
	require.Len(t, rows, 1)
	assert.Equal(t, 1, rows[0].HeldKeys)

	code, stdout, stderr = runCLI(t, "", "keys", "release", "--url", url, "--topic", topic, "--group", "billing", "--key", "acct-7")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "2 parked message(s) replayed")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 3
	}, 20*time.Second, 10*time.Millisecond, "the parked messages handled")
	mu.Lock()
	assert.Equal(t, []string{"credit 100", "debit 20", "credit 5"}, handled)
	mu.Unlock()
	code, stdout, _ = runCLI(t, "", "keys", "list", "--url", url, "--topic", topic, "--json")
	require.Equal(t, exitOK, code)
	assert.JSONEq(t, "[]", stdout)

	for _, args := range [][]string{
		{"keys"},
		{"keys", "drop"},
		{"keys", "list"},
		{"keys", "release", "--topic", topic, "--group", "billing"},
	} {
		code, _, stderr := runCLI(t, "", args...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, stderr)
	}
	code, _, stderr = runCLI(t, "", "keys", "release", "--url", url, "--topic", topic, "--group", "billing", "--key", "acct-7")
	assert.Equal(t, exitFailure, code)
	assert.Contains(t, stderr, "no held key")
}

// The dashboard lists the held keys of a dead-letter topic and releases
// one, as a guarded write.
func TestDashboardReleasesAHeldKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, "mem://", bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	defer func() { _ = b.Close(ctx) }()
	handled := make(chan string, 4)
	_, err = b.Subscribe(ctx, "ledger", func(_ context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "debit 70" {
			return bus.Reject(errors.New("account service down"))
		}
		handled <- string(d.Payload)
		return nil
	}, bus.WithGroup("billing"), bus.WithKeyOrdering(), bus.WithKeyFailure(bus.KeyHold))
	require.NoError(t, err)
	for _, p := range []string{"debit 70", "debit 20"} {
		require.NoError(t, b.Publish(ctx, "ledger", &bus.Message{Key: "acct-7", Payload: []byte(p)}))
	}
	g, err := newGuard(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, "")
	require.NoError(t, err)
	u := &uiServer{b: b, guard: g, allowWrites: true, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptestServer(t, u)
	var keys []heldKeyJSON
	require.Eventually(t, func() bool {
		resp, err := srv.Client().Get(srv.URL + "/api/keys?topic=ledger.dlq")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		keys = nil
		return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&keys) == nil && len(keys) == 1 && keys[0].Parked == 1
	}, 20*time.Second, 10*time.Millisecond, "the dashboard lists acct-7 held, 1 parked")
	assert.Equal(t, "acct-7", keys[0].Key)

	post := func(body string, withToken bool) int {
		req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/api/keys/release", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if withToken {
			req.Header.Set(tokenHeader, g.token)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	body := `{"dlq":"ledger.dlq","topic":"ledger","group":"billing","key":"acct-7"}`
	assert.Equal(t, 403, post(body, false), "a release without the page's token is refused")
	assert.Equal(t, 400, post(`{"dlq":"ledger.dlq","topic":"ledger","group":"billing"}`, true), "no key")
	assert.Equal(t, 200, post(body, true))
	select {
	case got := <-handled:
		assert.Equal(t, "debit 20", got)
	case <-ctx.Done():
		t.Fatal("the parked message is not handled after the release")
	}
	assert.Equal(t, 404, post(body, true), "nothing held any more")
}

package main

import (
	"context"
	"encoding/json"
	"errors"
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

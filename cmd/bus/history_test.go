package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/internal/msgid"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
)

// testHistory runs a message through a retry, a dead letter and a replay
// by bus dlq replay --events on a bus with events on, and reads its
// timeline with bus history; without the events topic, bus history says
// so.
func testHistory(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	suffix := strings.ReplaceAll(msgid.New(), "-", "")[:12]
	topic, events := "orders"+suffix, "events"+suffix
	b, err := bus.Open(ctx, url, bus.WithEvents(events))
	require.NoError(t, err)
	defer func() { assert.NoError(t, b.Close(context.Background())) }()
	var ok atomic.Bool
	_, err = b.Subscribe(ctx, topic, func(ctx context.Context, d *bus.Delivery) error {
		switch {
		case ok.Load():
			return nil
		case d.Attempt == 1:
			return bus.Nack(errors.New("db down"), 10*time.Millisecond)
		}
		return bus.Reject(errors.New("bad order"))
	}, bus.WithGroup("billing"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "o-42", Key: "customer-7"}))
	waitHistory(t, url, events, "o-42", 6)
	code, stdout, stderr := runCLI(t, "", "history", "--url", url, "--events", "none"+suffix, "--id", "o-42")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "dead_lettered", "the dead letter is found without events")
	assert.Contains(t, stderr, "there is no events topic none"+suffix, "and the command says the events topic is missing")
	ok.Store(true)
	code, stdout, stderr = runCLI(t, "", "dlq", "replay", "--url", url, "--of", topic, "--id", "o-42", "--events", events)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "replayed 1 dead letter(s)")
	h := waitHistory(t, url, events, "o-42", 9)
	var kinds []lifecycle.Kind
	for _, e := range h.Entries {
		kinds = append(kinds, e.Kind)
		assert.Equal(t, "o-42", e.MessageID)
		assert.Equal(t, topic, e.Topic)
	}
	assert.Equal(t, []lifecycle.Kind{
		lifecycle.Received, lifecycle.Failed, lifecycle.RetryScheduled,
		lifecycle.Received, lifecycle.Failed, lifecycle.DeadLettered,
		lifecycle.Replayed, lifecycle.Received, lifecycle.Succeeded,
	}, kinds, "the timeline of o-42")
	assert.Equal(t, "db down", h.Entries[1].Error)
	assert.Equal(t, "rejected", h.Entries[5].Code)

	code, stdout, stderr = runCLI(t, "", "history", "--url", url, "--events", events, "--key", "customer-7")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "retry_scheduled", "the table lists the steps")
	assert.Contains(t, stdout, "error: db down", "with their details")
	assert.Contains(t, stdout, "dead-letter topic "+topic+".dlq")
	code, _, stderr = runCLI(t, "", "history", "--url", url, "--events", events, "--id", "nobody")
	assert.Equal(t, exitFailure, code, "an unknown message has no history")
	assert.Contains(t, stderr, "nothing about nobody")
}

// waitHistory runs bus history --json for id until it lists n entries.
func waitHistory(t *testing.T, url, events, id string, n int) lifecycle.History {
	t.Helper()
	var h lifecycle.History
	var last string
	require.Eventually(t, func() bool {
		code, stdout, stderr := runCLI(t, "", "history", "--url", url, "--events", events, "--id", id, "--json")
		last = stdout + stderr
		if code != exitOK {
			return false
		}
		h = lifecycle.History{}
		require.NoError(t, json.Unmarshal([]byte(stdout), &h), stdout)
		return len(h.Entries) >= n
	}, 30*time.Second, 20*time.Millisecond, "%d entries in the history of %s; last: %s", n, id, last)
	require.Len(t, h.Entries, n, "no more than %d entries", n)
	return h
}

func TestHistoryOnMem(t *testing.T) {
	testHistory(t, "mem://history-cli-test")
}

func TestHistoryOnRedis(t *testing.T) {
	testHistory(t, redistest.URL(t))
}

func TestHistoryOnNATS(t *testing.T) {
	testHistory(t, natstest.Start(t).URL())
}

func TestHistoryRefusesBadArguments(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"neither id nor key", []string{"history"}, "give --id or --key"},
		{"both", []string{"history", "--id", "a", "--key", "b"}, "give --id or --key"},
		{"bad events topic", []string{"history", "--id", "a", "--events", "bad topic"}, "--events"},
		{"bad limit", []string{"history", "--id", "a", "--limit", "0"}, "--limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, "", tt.args...)
			assert.Equal(t, exitUsage, code, "a usage error")
			assert.Contains(t, stderr, tt.want)
		})
	}
}

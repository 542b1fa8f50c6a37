package observer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/observer"
)

func TestSlogLevelsKeepRetriedErrorsBelowError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	tests := []struct {
		name  string
		event observer.Event
		want  slog.Level
	}{
		{"handler error is retried", observer.Event{Scope: observer.ScopeHandler, Err: boom}, slog.LevelDebug},
		{"lease ran out", observer.Event{Scope: observer.ScopeLease, Err: boom}, slog.LevelWarn},
		{"connection recovered", observer.Event{Scope: observer.ScopeConnection}, slog.LevelInfo},
		{"connection lost", observer.Event{Scope: observer.ScopeConnection, Err: boom}, slog.LevelError},
		{"message dead-lettered", observer.Event{Scope: observer.ScopeDeadLetter, Err: boom, Code: "max_deliveries"}, slog.LevelWarn},
		{"dead-lettering failed", observer.Event{Scope: observer.ScopeDeadLetter, Err: boom}, slog.LevelError},
		{"panic", observer.Event{Scope: observer.ScopePanic, Err: boom}, slog.LevelError},
		{"receive failed", observer.Event{Scope: observer.ScopeReceive, Err: boom}, slog.LevelError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			o := observer.Slog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
			o.Observe(context.Background(), tt.event)
			var rec map[string]any
			require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), "one JSON record, got %q", buf.String())
			assert.Equal(t, tt.want.String(), rec["level"], "level of %s", tt.name)
			assert.Equal(t, tt.want, observer.Level(tt.event), "Level agrees with what Slog logged")
		})
	}
}

func TestSlogLogsEventFieldsButNoPayload(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	o := observer.Slog(slog.New(slog.NewJSONHandler(&buf, nil)))
	o.Observe(context.Background(), observer.Event{
		Scope: observer.ScopeDeadLetter, Topic: "orders", Group: "billing",
		MessageID: "m-1", Attempt: 3, Err: errors.New("max deliveries"), Stack: []byte("goroutine 1"),
	})
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), "one JSON record, got %q", buf.String())
	assert.Equal(t, "bus: dead_letter error", rec["msg"])
	assert.Equal(t, "dead_letter", rec["scope"])
	assert.Equal(t, "orders", rec["topic"])
	assert.Equal(t, "billing", rec["group"])
	assert.Equal(t, "m-1", rec["message_id"])
	assert.EqualValues(t, 3, rec["attempt"])
	assert.Equal(t, "max deliveries", rec["error"])
	assert.Equal(t, "goroutine 1", rec["stack"])
	assert.Len(t, rec, 10, "time, level, msg and the seven event fields, nothing else: %v", rec)
}

func TestSlogSkipsDisabledLevels(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	o := observer.Slog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})))
	o.Observe(context.Background(), observer.Event{Scope: observer.ScopeHandler, Err: errors.New("retry me")})
	assert.Empty(t, buf.String(), "a warning is not written by a handler at level Error")
	o.Observe(context.Background(), observer.Event{Scope: observer.ScopePanic, Err: errors.New("bug")})
	assert.NotEmpty(t, buf.String(), "an error is written")
}

func TestMultiPassesEachEventToEveryObserverInOrder(t *testing.T) {
	t.Parallel()
	var got []string
	rec := func(name string) observer.Observer {
		return observer.Func(func(_ context.Context, e observer.Event) { got = append(got, name+":"+e.MessageID) })
	}
	m := observer.Multi(rec("a"), nil, rec("b"))
	m.Observe(context.Background(), observer.Event{MessageID: "1"})
	m.Observe(context.Background(), observer.Event{MessageID: "2"})
	assert.Equal(t, []string{"a:1", "b:1", "a:2", "b:2"}, got, "every non-nil observer, in order, per event")
}

func TestMultiOfNothingIsANop(t *testing.T) {
	t.Parallel()
	assert.NotPanics(t, func() {
		observer.Multi().Observe(context.Background(), observer.Event{})
		observer.Multi(nil, nil).Observe(context.Background(), observer.Event{})
	}, "an empty Multi discards events")
}

func TestSlogLogsAScalingDecisionAtInfoWithItsFigures(t *testing.T) {
	var buf bytes.Buffer
	o := observer.Slog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	o.Observe(context.Background(), observer.Event{Scope: observer.ScopeScale, Topic: "orders", Group: "billing",
		Scale: &observer.Scale{From: 4, To: 8, Reason: "backlog", Backlog: 1200}})
	line := buf.String()
	for _, want := range []string{"level=INFO", `msg="bus: in-flight bound scaled"`, "scope=scale", "from=4", "to=8", "reason=backlog", "backlog=1200"} {
		require.Contains(t, line, want, "the line has %s", want)
	}
	require.NotContains(t, line, "error", "a decision is not an error")
}

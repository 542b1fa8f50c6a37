package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

func TestLoggingRedactsHeadersAndNeverLogsPayload(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := Logging(logger, LogHeaders("X-Visible"))(func(ctx context.Context, d *bus.Delivery) error { return errBoom })
	d := &bus.Delivery{
		Message: bus.Message{ID: "m-1", Payload: []byte("secret-payload"),
			Headers: map[string]string{"authorization": "secret-token", "x-visible": "shown"}},
		Topic: "orders", Group: "g", Attempt: 2,
	}
	require.ErrorIs(t, h(context.Background(), d), errBoom, "the handler's error passes through")

	out := buf.String()
	assert.NotContains(t, out, "secret-payload", "payload never logged")
	assert.NotContains(t, out, "secret-token", "header values redacted")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), "one JSON record: %s", out)
	assert.Equal(t, "WARN", rec["level"], "failures at Warn")
	assert.Equal(t, "orders", rec["topic"])
	assert.Equal(t, "m-1", rec["message_id"])
	assert.EqualValues(t, 2, rec["attempt"])
	assert.EqualValues(t, len("secret-payload"), rec["payload_bytes"])
	assert.Equal(t, "boom", rec["error"])
	assert.Equal(t, map[string]any{"authorization": Redacted, "x-visible": "shown"}, rec["headers"])
}

func TestLoggingOmitsHeadersByDefaultAndHonoursLevel(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	d := &bus.Delivery{Message: bus.Message{ID: "m-1", Headers: map[string]string{"k": "v"}}, Topic: "orders"}

	ok := Logging(logger)(func(ctx context.Context, d *bus.Delivery) error { return nil })
	require.NoError(t, ok(context.Background(), d))
	assert.Empty(t, buf.String(), "successes log at Debug, below the logger's level")

	ok = Logging(logger, LogLevels(slog.LevelInfo, slog.LevelError))(func(ctx context.Context, d *bus.Delivery) error { return nil })
	require.NoError(t, ok(context.Background(), d))
	assert.Contains(t, buf.String(), `"level":"INFO"`, "success level set by LogLevels")
	assert.NotContains(t, buf.String(), "headers", "headers are not logged without LogHeaders")
}

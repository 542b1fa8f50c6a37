package middleware

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/eventbus-go/bus"
)

// Redacted replaces header values in Logging output.
const Redacted = "[REDACTED]"

// LoggingOption configures Logging.
type LoggingOption func(*loggingConfig)

type loggingConfig struct {
	success, failure slog.Level
	headers          bool
	reveal           []string // lower-case header keys whose values are logged
}

// LogLevels sets the level of deliveries whose handler returned nil
// (default Debug) and of those that failed (default Warn).
func LogLevels(success, failure slog.Level) LoggingOption {
	return func(c *loggingConfig) { c.success, c.failure = success, failure }
}

// LogHeaders logs message headers as a group. Values are Redacted except
// for the listed keys (compared without case).
func LogHeaders(reveal ...string) LoggingOption {
	return func(c *loggingConfig) {
		c.headers = true
		for _, k := range reveal {
			c.reveal = append(c.reveal, strings.ToLower(k))
		}
	}
}

// Logging returns middleware that logs each handler call with its topic,
// group, message ID, attempt, payload size, duration and error. Payloads
// are never logged. Headers are logged only with LogHeaders, and then with
// their values redacted unless revealed. A nil logger uses slog.Default().
// Nothing is formatted when the logger is not enabled for the level.
//
// The error is logged here as well as reported to the bus observer when
// the bus settles the delivery; use one of the two for alerting.
func Logging(logger *slog.Logger, opts ...LoggingOption) bus.Middleware {
	if logger == nil {
		logger = slog.Default()
	}
	c := loggingConfig{success: slog.LevelDebug, failure: slog.LevelWarn}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			start := time.Now()
			err := next(ctx, d)
			level, msg := c.success, "bus: handled"
			if err != nil {
				level, msg = c.failure, "bus: handler failed"
			}
			if !logger.Enabled(ctx, level) {
				return err
			}
			attrs := make([]slog.Attr, 0, 8)
			attrs = append(attrs,
				slog.String("topic", d.Topic),
				slog.String("group", d.Group),
				slog.String("message_id", d.ID),
				slog.Int("attempt", d.Attempt),
				slog.Int("payload_bytes", len(d.Payload)),
				slog.Duration("duration", time.Since(start)),
			)
			if err != nil {
				attrs = append(attrs, slog.String("error", err.Error()))
			}
			if c.headers && len(d.Headers) > 0 {
				keys := make([]string, 0, len(d.Headers))
				for k := range d.Headers {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				hs := make([]any, 0, len(keys))
				for _, k := range keys {
					v := Redacted
					if slices.Contains(c.reveal, strings.ToLower(k)) {
						v = d.Headers[k]
					}
					hs = append(hs, slog.String(k, v))
				}
				attrs = append(attrs, slog.Group("headers", hs...))
			}
			logger.LogAttrs(ctx, level, msg, attrs...)
			return err
		}
	}
}

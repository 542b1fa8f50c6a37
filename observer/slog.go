package observer

import (
	"context"
	"log/slog"
)

// Slog returns an Observer that logs each event at level Error (Warn for
// ScopeLease and ScopeConnection) with the event's fields as attributes.
// Payloads and headers are never logged. A nil logger uses slog.Default().
func Slog(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return slogObserver{logger: logger}
}

type slogObserver struct{ logger *slog.Logger }

func (o slogObserver) Observe(ctx context.Context, e Event) {
	level := slog.LevelError
	if e.Scope == ScopeLease || e.Scope == ScopeConnection {
		level = slog.LevelWarn
	}
	if !o.logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs, slog.String("scope", e.Scope.String()))
	if e.Topic != "" {
		attrs = append(attrs, slog.String("topic", e.Topic))
	}
	if e.Group != "" {
		attrs = append(attrs, slog.String("group", e.Group))
	}
	if e.MessageID != "" {
		attrs = append(attrs, slog.String("message_id", e.MessageID))
	}
	if e.Attempt > 0 {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	if len(e.Stack) > 0 {
		attrs = append(attrs, slog.String("stack", string(e.Stack)))
	}
	o.logger.LogAttrs(ctx, level, "bus: "+e.Scope.String()+" error", attrs...)
}

package observer

import (
	"context"
	"log/slog"
)

// Slog returns an Observer that logs each event with the event's fields as
// attributes. Payloads and headers are never logged. A nil logger uses
// slog.Default().
//
// It is what a bus uses when no observer is given (logging through
// slog.Default()). Expected, self-healing errors stay below Warn, so that
// a retry that then succeeds prints nothing at the default level, and a
// healthy system does not page anyone; the level is Level(e):
//
//   - Debug for ScopeHandler: a handler error is retried by redelivery,
//     and its final fate is reported on its own (ScopeDeadLetter);
//   - Warn for a message that was dead-lettered or dropped (an event of
//     ScopeDeadLetter with a Code): one line per message, with its code;
//   - Warn for ScopeLease: the message comes back after its lease;
//   - Info for an event without an error (a recovery notice, for example
//     a connection that came back, or a scaling decision);
//   - Error for everything else: panics, a dead-lettering that failed,
//     and backend failures (receive, ack, reclaim, connection lost,
//     shutdown).
func Slog(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return slogObserver{logger: logger}
}

type slogObserver struct{ logger *slog.Logger }

func (o slogObserver) Observe(ctx context.Context, e Event) {
	level := Level(e)
	if !o.logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 10)
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
	if e.Code != "" {
		attrs = append(attrs, slog.String("code", e.Code))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	if e.Recovery != nil {
		attrs = append(attrs, slog.Duration("outage", e.Recovery.Duration), slog.Int("suppressed_errors", e.Recovery.Suppressed))
	}
	if e.Scale != nil {
		attrs = append(attrs, slog.Int("from", e.Scale.From), slog.Int("to", e.Scale.To),
			slog.String("reason", e.Scale.Reason), slog.Int64("backlog", e.Scale.Backlog))
	}
	if len(e.Stack) > 0 {
		attrs = append(attrs, slog.String("stack", string(e.Stack)))
	}
	msg := "bus: " + e.Scope.String() + " error"
	if e.Scope == ScopeDeadLetter && e.Code != "" {
		msg = "bus: message dead-lettered"
	}
	if e.Err == nil {
		msg = "bus: " + e.Scope.String()
		if e.Recovery != nil {
			msg += " recovered"
		}
		if e.Scale != nil {
			msg = "bus: in-flight bound scaled"
		}
	}
	o.logger.LogAttrs(ctx, level, msg, attrs...)
}

// Level is the slog level Slog logs e at (see Slog).
func Level(e Event) slog.Level {
	switch {
	case e.Err == nil:
		return slog.LevelInfo
	case e.Scope == ScopeHandler:
		return slog.LevelDebug
	case e.Scope == ScopeLease, e.Scope == ScopeDeadLetter && e.Code != "":
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

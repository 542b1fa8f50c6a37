package natstest

import (
	"fmt"
	"sync"
	"testing"
)

// warnLogger passes the embedded server's warnings and errors to the
// test's log, so a failed JetStream request shows its cause (the API
// answers "error creating store for stream" and logs why). It stops
// passing them on when the server is shut down: the test may have ended.
type warnLogger struct {
	tb testing.TB

	mu   sync.Mutex
	done bool
}

func (l *warnLogger) logf(level, format string, v []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.tb.Logf("nats-server %s: %s", level, fmt.Sprintf(format, v...))
	}
}

// stop ends the passing on; later lines are dropped.
func (l *warnLogger) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
}

func (l *warnLogger) Noticef(string, ...any)        {}
func (l *warnLogger) Debugf(string, ...any)         {}
func (l *warnLogger) Tracef(string, ...any)         {}
func (l *warnLogger) Warnf(format string, v ...any) { l.logf("warning", format, v) }
func (l *warnLogger) Errorf(format string, v ...any) {
	l.logf("error", format, v)
}
func (l *warnLogger) Fatalf(format string, v ...any) { l.logf("fatal", format, v) }

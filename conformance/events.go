package conformance

import (
	"context"
	"sync"
	"testing"

	"github.com/eventbus-go/bus/observer"
)

// eventLog is an observer that keeps every event. Safe for concurrent use.
type eventLog struct {
	mu   sync.Mutex
	list []observer.Event
}

// Observe implements observer.Observer.
func (l *eventLog) Observe(_ context.Context, e observer.Event) {
	l.mu.Lock()
	l.list = append(l.list, e)
	l.mu.Unlock()
}

// find returns the first event that matches.
func (l *eventLog) find(match func(observer.Event) bool) (observer.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.list {
		if match(e) {
			return e, true
		}
	}
	return observer.Event{}, false
}

// has reports whether an event matches.
func (l *eventLog) has(match func(observer.Event) bool) bool {
	_, ok := l.find(match)
	return ok
}

// scope returns the events of one scope.
func (l *eventLog) scope(s observer.Scope) []observer.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []observer.Event
	for _, e := range l.list {
		if e.Scope == s {
			out = append(out, e)
		}
	}
	return out
}

// forMessage matches events of scope s about message id.
func forMessage(s observer.Scope, id string) func(observer.Event) bool {
	return func(e observer.Event) bool { return e.Scope == s && e.MessageID == id }
}

// logErrors logs, when t failed, the events that carried an error (the
// first maxLoggedErrors of them): what the backend and the bus reported
// is the first clue to a failure that a loaded machine shows once.
func (l *eventLog) logErrors(t testing.TB) {
	if !t.Failed() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.list {
		if e.Err == nil {
			continue
		}
		if n++; n > maxLoggedErrors {
			continue
		}
		t.Logf("event %s topic %q group %q message %q: %v", e.Scope, e.Topic, e.Group, e.MessageID, e.Err)
	}
	if n > maxLoggedErrors {
		t.Logf("%d more events with an error", n-maxLoggedErrors)
	}
}

// maxLoggedErrors bounds what logErrors logs.
const maxLoggedErrors = 40

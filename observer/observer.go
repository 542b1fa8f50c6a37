package observer

import (
	"context"
	"fmt"
)

// Scope says where an error happened.
type Scope int

const (
	// ScopeReceive: fetching messages from the backend failed.
	ScopeReceive Scope = iota + 1
	// ScopeAck: flushing acks to the backend failed.
	ScopeAck
	// ScopeNack: a nack (redelivery request) failed.
	ScopeNack
	// ScopeHandler: a handler returned an error.
	ScopeHandler
	// ScopePanic: a handler panicked; Event.Stack holds the stack.
	ScopePanic
	// ScopeReclaim: reclaiming expired leases, or re-creating a lost
	// consumer group, failed or lost messages.
	ScopeReclaim
	// ScopeDeadLetter: a message was dead-lettered (Code says why and Err
	// is the reason), or dropped because dead-lettering is off, or
	// dead-lettering failed (Code empty).
	ScopeDeadLetter
	// ScopeDecode: an entry could not be decoded into a message.
	ScopeDecode
	// ScopeShutdown: closing a subscription or the backend failed.
	ScopeShutdown
	// ScopePublish: a background publish (for example an async window)
	// failed after the caller had returned.
	ScopePublish
	// ScopeLease: a lease expired before the message was settled.
	ScopeLease
	// ScopeConnection: the connection to the broker dropped or recovered.
	ScopeConnection
)

var scopeNames = [...]string{
	ScopeReceive:    "receive",
	ScopeAck:        "ack",
	ScopeNack:       "nack",
	ScopeHandler:    "handler",
	ScopePanic:      "panic",
	ScopeReclaim:    "reclaim",
	ScopeDeadLetter: "dead_letter",
	ScopeDecode:     "decode",
	ScopeShutdown:   "shutdown",
	ScopePublish:    "publish",
	ScopeLease:      "lease",
	ScopeConnection: "connection",
}

// String returns the scope's name, e.g. "handler".
func (s Scope) String() string {
	if s > 0 && int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return fmt.Sprintf("Scope(%d)", int(s))
}

// Event is one error that the bus or a backend handled in the background,
// or (with a nil Err and Recovery set) the end of an outage. Fields that
// do not apply are empty.
type Event struct {
	Scope     Scope
	Topic     string
	Group     string
	MessageID string
	Attempt   int
	Err       error
	// Code is the machine-readable reason of a message that was
	// dead-lettered or dropped (ScopeDeadLetter): "max-deliveries",
	// "permanent", "rejected", "expired", ... Empty for every other
	// event, and for a dead-lettering that failed.
	Code string
	// Stack is the goroutine stack of a recovered panic (ScopePanic).
	Stack []byte
	// Recovery is set, with a nil Err, on the event that ends an outage
	// (see Outage). Observers that count errors skip such events.
	Recovery *Recovery
}

// Observer receives events. Implementations must be safe for concurrent
// use and should not block.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// Func adapts a function to an Observer.
type Func func(ctx context.Context, e Event)

// Observe calls f.
func (f Func) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Nop returns an Observer that discards every event. A bus with no
// observer logs what a user must know of through slog.Default() (see
// Slog); bus.WithObserver(observer.Nop()) silences it.
func Nop() Observer { return nopObserver{} }

type nopObserver struct{}

func (nopObserver) Observe(context.Context, Event) {}

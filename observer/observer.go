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
	// ScopeReclaim: reclaiming leases that ran out, or re-creating a lost
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
	// ScopeLease: a lease ran out before the message was settled; or,
	// once per subscription (per partition of a partitioned topic), the
	// late settlements of handlers that outlived a forced Close were
	// dropped (Err says how many), so their messages come back after
	// their lease.
	ScopeLease
	// ScopeConnection: the connection to the broker dropped or recovered.
	ScopeConnection
	// ScopeScale: a notice, not an error (Err is nil): an autoscaled
	// subscription changed its in-flight bound; Scale says from what to
	// what and why.
	ScopeScale
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
	ScopeScale:      "scale",
}

// String returns the scope's name, e.g. "handler".
func (s Scope) String() string {
	if s > 0 && int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return fmt.Sprintf("Scope(%d)", int(s))
}

// Event is one error that the bus or a backend handled in the background,
// or a notice with a nil Err: the end of an outage (Recovery set) or a
// scaling decision (Scale set). Fields that do not apply are empty.
type Event struct {
	Scope     Scope
	Topic     string
	Group     string
	MessageID string
	Attempt   int
	Err       error
	// Code is the machine-readable reason of a message that was
	// dead-lettered or dropped (ScopeDeadLetter): "max_deliveries",
	// "rejected", "expired", ... Empty for every other
	// event, and for a dead-lettering that failed.
	Code string
	// Stack is the goroutine stack of a recovered panic (ScopePanic).
	Stack []byte
	// Recovery is set, with a nil Err, on the event that ends an outage
	// (see Outage). Observers that count errors skip such events.
	Recovery *Recovery
	// Scale is set, with a nil Err and ScopeScale, when an autoscaled
	// subscription changes its in-flight bound. Observers that count
	// errors skip such events.
	Scale *Scale
}

// Scale describes one decision of an autoscaled subscription (see
// bus.WithAutoscale).
type Scale struct {
	// From and To are the in-flight bound before and after.
	From, To int
	// Reason is why: "backlog" (the group's lag grows or stays high and
	// handler latency holds), "drained" (the backlog is gone and the
	// bound is not used) or "latency" (handler latency rose markedly).
	Reason string
	// Backlog is the group's lag when the decision was made.
	Backlog int64
}

// String returns a short text such as "4 -> 8 (backlog 12000)".
func (s *Scale) String() string {
	return fmt.Sprintf("%d -> %d (%s, backlog %d)", s.From, s.To, s.Reason, s.Backlog)
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

package bus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// This file holds what readiness and liveness probes call: Bus.Ping, a
// round trip to the broker, and Subscription.Health and Lag, how a
// subscription's fetching goes.

// Ping makes one round trip to the broker and returns nil when it
// answered: a readiness probe's check. It returns by ctx's deadline, also
// on a dead network, with an error wrapping ctx's. It returns an error
// wrapping ErrClosed after Close, and one wrapping ErrUnsupported when the
// backend cannot ping (it implements no backend.Pinger); mem, redis,
// nats and postgres backends can. Ping changes nothing at the broker.
func (b *Bus) Ping(ctx context.Context) error {
	if b.optErr != nil {
		return b.optErr
	}
	if !b.ops.enter() {
		return fmt.Errorf("bus: ping: %w", ErrClosed)
	}
	defer b.ops.leave()
	p, ok := b.be.(backend.Pinger)
	if !ok {
		return fmt.Errorf("bus: ping: %w: %s has no Pinger", ErrUnsupported, b.caps.Name)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("bus: ping: %w", err)
	}
	if err := p.Ping(ctx); err != nil {
		return fmt.Errorf("bus: ping: %w", err)
	}
	return nil
}

// SubscriptionHealth is how a subscription's fetching goes, for
// readiness and liveness probes (Subscription.Health). A subscription
// with free capacity asks the broker for messages about once a second
// even when idle (a backend's Receive blocks for at most about a
// second), so a LastReceive older than a few seconds on a Running, not
// Standby, subscription means that the broker does not answer (Failing
// then counts the failures) or that it has no free capacity: every
// in-flight slot is taken by handlers that are slow or stuck.
type SubscriptionHealth struct {
	// Running is false once the subscription has ended (Done is
	// closed); Err then says why.
	Running bool
	// Err is why the subscription ended, as Subscription.Err.
	Err error
	// Standby is set while the member fetches nothing by design: it
	// waits for the lock of a key-ordered group (WithKeyOrdering), or
	// owns no partition of a partitioned topic. LastReceive does not
	// advance then, except on a backend whose own assignment left the
	// member without partitions (backend.Idler: Kafka), where the member
	// keeps polling its group.
	Standby bool
	// LastReceive is when a Receive last returned without an error (with
	// messages or none); zero before the first.
	LastReceive time.Time
	// LastError is the error of the last failed Receive or group lock
	// round, and LastErrorAt when it failed; nil and zero when none has
	// failed. They stay set after fetching recovers: compare LastErrorAt
	// with LastReceive, or read Failing.
	LastError   error
	LastErrorAt time.Time
	// Failing counts the Receives and lock rounds that failed since the
	// last Receive that succeeded (over every partition the member
	// owns); 0 while they succeed.
	Failing int
}

// Health returns how the subscription's fetching goes now; see
// SubscriptionHealth. It does no I/O.
func (s *Subscription) Health() SubscriptionHealth {
	h := s.health.snapshot()
	select {
	case <-s.run.Done():
		h.Err = s.run.Err()
		return h
	default:
	}
	h.Running = true
	if s.parts != nil {
		h.Standby = len(s.parts.Runners()) == 0
	} else if c, ok := s.run.(*consumer); ok && c.owner != nil {
		h.Standby = !c.owner.fetching()
	} else if ok {
		if id, ok := c.bsub.(backend.Idler); ok {
			h.Standby = id.Idle()
		}
	}
	return h
}

// Lag returns how many retained messages the subscription's group has
// not received yet, summed over the partitions of a partitioned topic,
// as Bus.Groups reports it (one Groups call, within ctx). It is Unknown
// when the backend cannot count it or does not list the group; the error
// wraps ErrUnsupported when the backend has no Inspector.
func (s *Subscription) Lag(ctx context.Context) (Figure, error) {
	gs, err := s.bus.Groups(ctx, s.topic)
	if err != nil {
		return backend.Unknown, err
	}
	lag, found := Figure(0), false
	for _, g := range gs {
		if g.Name != s.group {
			continue
		}
		if !g.Lag.Known() {
			return backend.Unknown, nil
		}
		lag += g.Lag
		found = true
	}
	if !found {
		return backend.Unknown, nil
	}
	return lag, nil
}

// health records how the Receives of a subscription (of each partition
// it owns) and its group lock rounds go. It is safe for concurrent use.
type health struct {
	mu          sync.Mutex
	lastReceive time.Time
	lastErr     error
	lastErrAt   time.Time
	failing     int
}

// received records the outcome of a Receive.
func (h *health) received(err error) {
	if h == nil {
		return
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.lastErr, h.lastErrAt = err, now
		h.failing++
		return
	}
	h.lastReceive, h.failing = now, 0
}

// lockFailed records a group lock round that failed.
func (h *health) lockFailed(err error) {
	if h == nil {
		return
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr, h.lastErrAt = err, now
	h.failing++
}

func (h *health) snapshot() SubscriptionHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	return SubscriptionHealth{LastReceive: h.lastReceive, LastError: h.lastErr, LastErrorAt: h.lastErrAt, Failing: h.failing}
}

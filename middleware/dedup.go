package middleware

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/msgid"
)

// DedupState is what Store.Begin found for a key.
type DedupState int

const (
	// DedupClaimed: the key was free; the caller now holds it for the
	// lease and must Commit or Abort.
	DedupClaimed DedupState = iota + 1
	// DedupBusy: another claim holds the key; its outcome is not known yet.
	DedupBusy
	// DedupDone: the key was committed; the message was handled.
	DedupDone
)

// String returns "claimed", "busy" or "done".
func (s DedupState) String() string {
	switch s {
	case DedupClaimed:
		return "claimed"
	case DedupBusy:
		return "busy"
	case DedupDone:
		return "done"
	}
	return fmt.Sprintf("DedupState(%d)", int(s))
}

// Store keeps the keys Dedup has seen. Implementations must be safe for
// concurrent use; MemoryStore is provided here and a Redis store in package middleware/redisdedup.
type Store interface {
	// Begin claims key with token for lease if it is free. It returns
	// DedupDone if the key was committed and its TTL has not passed,
	// DedupBusy if another live claim holds it, and DedupClaimed when
	// this call took it.
	Begin(ctx context.Context, key, token string, lease time.Duration) (DedupState, error)
	// Commit marks key handled for ttl, whoever holds the claim.
	Commit(ctx context.Context, key string, ttl time.Duration) error
	// Abort removes the claim on key if token still holds it, so the key
	// can be handled again.
	Abort(ctx context.Context, key, token string) error
}

// ErrDuplicateInProgress is returned by the Dedup handler for a delivery
// whose key is claimed by another delivery still being handled. The bus
// nacks it, so it is looked at again after the retry backoff.
var ErrDuplicateInProgress = errors.New("duplicate message is being handled")

// Defaults of Dedup.
const (
	DefaultDedupTTL   = 24 * time.Hour
	DefaultDedupLease = 5 * time.Minute
)

// DedupOption configures Dedup.
type DedupOption func(*dedupConfig)

type dedupConfig struct {
	ttl     time.Duration
	lease   time.Duration
	key     func(*bus.Delivery) string
	onError func(ctx context.Context, d *bus.Delivery, err error)
}

// DedupTTL sets how long a handled key is remembered (default
// DefaultDedupTTL). Values <= 0 keep the default.
func DedupTTL(ttl time.Duration) DedupOption {
	return func(c *dedupConfig) {
		if ttl > 0 {
			c.ttl = ttl
		}
	}
}

// DedupLease sets how long a claim lasts while the handler runs (default
// DefaultDedupLease). It should exceed the longest handler run; a claim
// whose holder crashed frees itself after it. Values <= 0 keep the default.
func DedupLease(lease time.Duration) DedupOption {
	return func(c *dedupConfig) {
		if lease > 0 {
			c.lease = lease
		}
	}
}

// DedupKey sets how a delivery maps to a key. The default is
// "<group>/<message ID>", so each consumer group handles a message once.
func DedupKey(f func(*bus.Delivery) string) DedupOption {
	return func(c *dedupConfig) {
		if f != nil {
			c.key = f
		}
	}
}

// DedupOnError sets a function that receives store errors Dedup cannot
// return: a failed Commit after the handler succeeded (the message is
// still acked; the claim expires after the lease) or a failed Abort. The
// default drops them.
func DedupOnError(f func(ctx context.Context, d *bus.Delivery, err error)) DedupOption {
	return func(c *dedupConfig) {
		if f != nil {
			c.onError = f
		}
	}
}

// Dedup returns middleware for idempotent consumption: a message whose key
// (by default group and message ID) was already handled successfully is
// acked without running the handler.
//
// # Claim before, commit after
//
// Dedup claims the key in the store before the handler runs and commits it
// only after the handler returned nil. A failed or panicking handler
// aborts the claim, so the redelivery runs the handler again: no message
// is lost because an attempt failed. While a claim is held, a concurrent
// duplicate (for example a redelivery after a lease ran out) is not run
// but nacked with ErrDuplicateInProgress, so at most one copy runs at a
// time. Marking only after success would let concurrent duplicates both
// run; marking before without a claim state would lose messages whose
// handler failed.
//
// A store error fails the delivery (the bus retries it): Dedup never runs
// a handler it could not claim. In AckManual the key is committed when the
// handler returns nil, whatever it later does with the delivery. Dedup
// panics if store is nil.
func Dedup(store Store, opts ...DedupOption) bus.Middleware {
	if store == nil {
		panic("middleware: Dedup with nil store")
	}
	c := dedupConfig{
		ttl:     DefaultDedupTTL,
		lease:   DefaultDedupLease,
		key:     func(d *bus.Delivery) string { return d.Group + "/" + d.ID },
		onError: func(context.Context, *bus.Delivery, error) {},
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) (err error) {
			key := c.key(d)
			token := msgid.New()
			state, err := store.Begin(ctx, key, token, c.lease)
			if err != nil {
				return fmt.Errorf("middleware: dedup %q: %w", d.ID, err)
			}
			switch state {
			case DedupDone:
				if err := d.Ack(ctx); err != nil && !errors.Is(err, bus.ErrAlreadySettled) {
					return err
				}
				return nil
			case DedupBusy:
				return fmt.Errorf("middleware: dedup %q: %w", d.ID, ErrDuplicateInProgress)
			case DedupClaimed:
			default:
				return fmt.Errorf("middleware: dedup %q: store returned %v", d.ID, state)
			}
			bg := context.WithoutCancel(ctx)
			ok := false
			defer func() {
				if ok {
					return
				}
				// Failed or panicked: give the key back for the redelivery.
				if aerr := store.Abort(bg, key, token); aerr != nil {
					c.onError(bg, d, fmt.Errorf("middleware: dedup abort %q: %w", d.ID, aerr))
				}
			}()
			if err := next(ctx, d); err != nil {
				return err
			}
			ok = true
			if cerr := store.Commit(bg, key, c.ttl); cerr != nil {
				c.onError(bg, d, fmt.Errorf("middleware: dedup commit %q: %w", d.ID, cerr))
			}
			return nil
		}
	}
}

package backend

import (
	"context"
	"time"
)

// GroupLocker is implemented by backends that can let one member of a
// consumer group at a time consume a topic. The bus uses it for
// key-ordered subscriptions (bus.WithKeyOrdering): the member that holds
// the group's lock fetches, the others wait, so the messages of one key
// are never handled by two members at once, whether they run in one
// process or many.
//
// A lock is held until ttl after its last successful LockGroup by its
// holder, or until UnlockGroup. The conformance suite checks that two
// holders never hold one lock at once and that a lock whose holder stopped
// renewing it can be taken over.
type GroupLocker interface {
	// LockGroup takes the lock of group on topic for holder, or renews
	// it when holder holds it, until ttl from now. It reports whether
	// holder holds the lock when it returns, and, when it has just taken
	// it, whether it took it over from another holder that neither
	// renewed nor released it (that holder stopped or died: its unsettled
	// deliveries come back after their leases). It returns by ctx's
	// deadline.
	LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (held, takeover bool, err error)
	// UnlockGroup releases the lock when holder holds it, so that the next
	// holder takes it without a takeover. A backend whose subscription
	// of the holder closed leaving deliveries at the broker that come
	// back only after their leases (a fetch the broker may still answer)
	// lets the lock lapse instead: the next holder then takes it over and
	// waits for them.
	UnlockGroup(ctx context.Context, topic, group, holder string) error
}

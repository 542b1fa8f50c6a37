package inmemory

import (
	"context"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var (
	_ backend.Releaser = (*Subscription)(nil)
	_ backend.Snoozer  = (*Subscription)(nil)
)

// Release ends the lease and makes the entry available to the group again
// at once with the same Attempt: the delivery does not count. The bus
// releases the deliveries whose handler a shutdown cancelled. A stale id
// (its lease ended) returns an error wrapping backend.ErrStale and changes
// nothing.
func (s *Subscription) Release(ctx context.Context, id backend.AckID) error {
	return s.giveBack("release", id, 0, 0)
}

// Snooze ends the lease and makes the entry available to the group again
// after delay with the same Attempt (backend.Snoozer). A stale id returns
// an error wrapping backend.ErrStale and changes nothing.
func (s *Subscription) Snooze(ctx context.Context, id backend.AckID, delay time.Duration) error {
	return s.giveBack("snooze", id, delay, 0)
}

package inmemory

import (
	"context"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Releaser = (*Subscription)(nil)

// Release ends the lease and makes the entry available to the group again
// at once with the same Attempt: the delivery does not count. The bus
// releases the deliveries whose handler a shutdown cancelled. A stale id
// (its lease ended) returns an error wrapping backend.ErrStale and changes
// nothing.
func (s *Subscription) Release(ctx context.Context, id backend.AckID) error {
	if s.b.closed.Load() {
		return errClosed("release", s.t.name)
	}
	t := s.t
	t.lock()
	defer t.unlock()
	l := s.leaseOf(id)
	if l == nil {
		return s.staleErr("release", id)
	}
	l.state = leaseNacked
	g := l.g
	g.ready.push(redo{e: l.e, attempt: l.attempt, chain: l.chain})
	g.notify()
	g.trim()
	return nil
}

package inmemory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.PendingLister = (*Subscription)(nil)

// PendingDeliveries implements backend.PendingLister: the group's active
// leases, its redeliveries due and its delayed nacks, in log order. The
// list is exact.
func (s *Subscription) PendingDeliveries(ctx context.Context, max int) ([]backend.Pending, bool, error) {
	if max < 1 {
		return nil, false, fmt.Errorf("inmemory: pending deliveries of %q: %w: max %d", s.t.name, ErrInvalidOption, max)
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	t, g := s.t, s.g
	type held struct {
		e   *entry
		end int64
	}
	var hs []held
	t.lock()
	if s.closed || s.b.closed.Load() {
		t.unlock()
		return nil, false, errClosed("pending deliveries", t.name)
	}
	now := t.b.now()
	for _, q := range g.queues {
		for i := range q.recs.n {
			r := &q.recs.buf[(q.recs.head+i)&(len(q.recs.buf)-1)]
			for j := r.next; j < len(r.ls); j++ {
				if l := &r.ls[j]; !r.stale(l) {
					hs = append(hs, held{l.e, l.deadline})
				}
			}
		}
	}
	for i := range g.ready.n {
		hs = append(hs, held{g.ready.buf[(g.ready.head+i)&(len(g.ready.buf)-1)].e, now})
	}
	for _, d := range g.delayed {
		hs = append(hs, held{d.e, d.due})
	}
	slices.SortFunc(hs, func(a, b held) int { return cmp.Compare(a.e.off, b.e.off) })
	complete := len(hs) <= max
	hs = hs[:min(len(hs), max)]
	out := make([]backend.Pending, len(hs))
	for i, h := range hs {
		out[i] = backend.Pending{ID: h.e.id, Key: h.e.key(), LeaseEnd: t.b.epoch.Add(time.Duration(h.end))}
	}
	t.unlock()
	return out, complete, nil
}

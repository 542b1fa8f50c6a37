package inmemory

import (
	"context"
	"fmt"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupSeeker = (*Backend)(nil)

// SeekGroup implements backend.GroupSeeker for a group without live
// members (close its subscriptions first; the group and its position
// stay): the entries the group has in flight, waiting for redelivery or
// nacked with a delay are given up (a late settlement of them does
// nothing), and the group then receives every retained entry from the
// target on, those it had settled included.
func (b *Backend) SeekGroup(ctx context.Context, topic, group string, to backend.SeekTarget) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.closed.Load() {
		return errClosed("seek group", topic)
	}
	t := b.br.lookup(topic)
	if t == nil {
		return fmt.Errorf("inmemory: seek group %q of %q: %w", group, topic, backend.ErrUnknownGroup)
	}
	t.lock()
	defer t.unlock()
	g := t.groups[group]
	if g == nil {
		return fmt.Errorf("inmemory: seek group %q of %q: %w", group, topic, backend.ErrUnknownGroup)
	}
	if g.members > 0 {
		return fmt.Errorf("inmemory: seek group %q of %q: the group has %d live member(s); close them first", group, topic, g.members)
	}
	g.dropOutstanding()
	target := t.seekOffset(to)
	for off := min(target, g.cursor); off < max(target, g.cursor); off++ {
		e := t.at(off)
		switch {
		case e == nil:
		case target < g.cursor:
			e.refs++ // delivered to the group again
		default:
			t.settle(e) // skipped: the group will never receive it
		}
	}
	g.cursor = target
	g.notify()
	return nil
}

// dropOutstanding gives up the entries the group has in flight, ready for
// redelivery or delayed, taking its references off them.
func (g *group) dropOutstanding() {
	t := g.t
	for g.ready.len() > 0 {
		if r := g.ready.pop(); r.chain == nil || !r.chain.settled {
			t.settle(r.e)
		}
	}
	for len(g.delayed) > 0 {
		if d := g.delayed.pop(); d.chain == nil || !d.chain.settled {
			t.settle(d.e)
		}
	}
	for _, q := range g.queues {
		for q.recs.len() > 0 {
			r := q.recs.front()
			for l := r.live(); l != nil; l = r.live() {
				l.state = leaseNacked
				t.settle(l.e)
			}
			q.recs.pop()
		}
	}
}

// seekOffset is the offset a group seeking to starts from: the first
// retained entry published at or after the time.
func (t *topic) seekOffset(to backend.SeekTarget) uint64 {
	switch {
	case to.Oldest:
		return t.base
	case to.Newest:
		return t.head
	}
	at := to.Time.UnixNano()
	for off := t.base; off < t.head; off++ {
		if e := t.at(off); e != nil && e.published >= at {
			return off
		}
	}
	return t.head
}

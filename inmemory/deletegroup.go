package inmemory

import (
	"context"
	"slices"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupDeleter = (*Backend)(nil)

// DeleteGroup implements backend.GroupDeleter: the group's references to
// the entries it has not received, has in flight, ready for redelivery
// or nacked with a delay are taken off (an entry no other group needs is
// freed), the group leaves the topic, and its group lock goes. A member
// still subscribed to it finds its Receive failing for good, its Ack
// doing nothing and its other settlements stale.
func (b *Backend) DeleteGroup(ctx context.Context, topic, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.closed.Load() {
		return errClosed("delete group", topic)
	}
	b.br.locks.remove(topic + "\x00" + name)
	t := b.br.lookup(topic)
	if t == nil {
		return nil
	}
	t.lock()
	defer t.unlock()
	g := t.groups[name]
	if g == nil {
		return nil
	}
	g.dropOutstanding()
	for off := g.cursor; off < t.head; off++ {
		if e := t.at(off); e != nil {
			t.settleAt(e)
		}
	}
	g.cursor = t.head
	t.advance()
	g.deleted = true
	delete(t.groups, name)
	t.glist = slices.DeleteFunc(t.glist, func(x *group) bool { return x == g })
	g.notify()
	return nil
}

// remove drops the lock of key, whoever holds it.
func (g *groupLocks) remove(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.locks, key)
}

package inmemory

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// BoundRetention caps topic at bound.MaxLen entries and bound.MaxAge
// while it has no group: each publish drops the oldest entries past
// either bound, so the topic never holds more than MaxLen entries, and
// none older than MaxAge right after a publish. A topic with a group
// frees what every group settled at once, and Options.MaxBacklog bounds
// the rest. It implements backend.RetentionBounder and does no I/O.
func (b *Backend) BoundRetention(_ context.Context, topic string, bound backend.RetentionBound) error {
	if b.closed.Load() {
		return errClosed("bound retention of", topic)
	}
	if bound.MaxLen < 0 || bound.MaxAge < 0 {
		return fmt.Errorf("inmemory: bound retention of %q: %w: negative bound", topic, ErrInvalidOption)
	}
	t := b.br.topic(topic)
	if t == nil {
		return errClosed("bound retention of", topic)
	}
	t.lock()
	t.bound = bound
	if len(t.glist) == 0 {
		t.dropPastBound()
	}
	t.unlock()
	return nil
}

// dropPastBound drops the oldest entries of a topic with no group while
// they lie past its retention bound. mu is held.
func (t *topic) dropPastBound() {
	bd := t.bound
	if bd == (backend.RetentionBound{}) {
		return
	}
	var cutoff int64
	if bd.MaxAge > 0 {
		cutoff = time.Now().Add(-bd.MaxAge).UnixNano()
	}
	for t.base < t.head {
		if bd.MaxLen > 0 && t.head-t.base > uint64(bd.MaxLen) {
			t.dropFront()
			continue
		}
		if e := t.ring[t.base&t.mask()]; bd.MaxAge > 0 && (e == nil || e.published < cutoff) {
			t.dropFront()
			continue
		}
		return
	}
}

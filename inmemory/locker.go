package inmemory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupLocker = (*Backend)(nil)

// groupLocks are the group locks of a broker (backend.GroupLocker).
type groupLocks struct {
	mu    sync.Mutex
	locks map[string]*groupLock // by topic + "\x00" + group
}

type groupLock struct {
	holder string
	until  time.Time // held until then unless renewed
}

// LockGroup implements backend.GroupLocker.
func (b *Backend) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (held, takeover bool, err error) {
	if b.closed.Load() {
		return false, false, fmt.Errorf("inmemory: lock group %q of %q: %w", group, topic, backend.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return false, false, err
	}
	return b.br.locks.lock(topic+"\x00"+group, holder, ttl, time.Now())
}

// UnlockGroup implements backend.GroupLocker.
func (b *Backend) UnlockGroup(_ context.Context, topic, group, holder string) error {
	b.br.locks.unlock(topic+"\x00"+group, holder)
	return nil
}

func (g *groupLocks) lock(key, holder string, ttl time.Duration, now time.Time) (held, takeover bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.locks == nil {
		g.locks = map[string]*groupLock{}
	}
	l := g.locks[key]
	switch {
	case l == nil:
		g.locks[key] = &groupLock{holder: holder, until: now.Add(ttl)}
		return true, false, nil
	case l.holder == holder:
		l.until = now.Add(ttl)
		return true, false, nil
	case now.Before(l.until):
		return false, false, nil
	}
	// Expired: its holder stopped renewing without unlocking (an unlock
	// removes the lock).
	l.holder, l.until = holder, now.Add(ttl)
	return true, true, nil
}

func (g *groupLocks) unlock(key, holder string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.locks[key]; l != nil && l.holder == holder {
		delete(g.locks, key)
	}
}

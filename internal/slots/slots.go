// Package slots counts units held at once: the in-flight slots of a
// subscription, the waiting set of a key-ordered one, the concurrency
// limiter and the autoscale controller of package bus.
package slots

import (
	"context"
	"sync"
	"time"
)

// Pool caps the units held at once. Safe for concurrent use.
type Pool struct {
	mu      sync.Mutex
	limit   int
	used    int
	waiters []waiter
}

// waiter is a blocked Acquire; it is woken when need units are free.
type waiter struct {
	ch   chan struct{}
	need int
}

// New returns a Pool of limit units (limit >= 1).
func New(limit int) *Pool { return &Pool{limit: limit} }

// Acquire takes between 1 and most units. It waits until at least need
// units are free, or, once linger fires (nil = never), until any unit is.
// Waiting for several units at once lets a saturated subscription fetch in
// batches instead of one message per freed slot.
func (l *Pool) Acquire(ctx context.Context, need, most int, linger <-chan time.Time) (int, error) {
	most = max(most, 1)
	need = min(max(need, 1), most)
	for {
		l.mu.Lock()
		if n := l.takeLocked(need, most); n > 0 {
			l.mu.Unlock()
			return n, nil
		}
		w := waiter{ch: make(chan struct{}), need: need}
		l.waiters = append(l.waiters, w)
		l.mu.Unlock()
		select {
		case <-w.ch:
		case <-linger:
			linger = nil
			need = 1
			l.removeWaiter(w.ch)
		case <-ctx.Done():
			l.removeWaiter(w.ch)
			return 0, ctx.Err()
		}
	}
}

// TryAcquire takes between need and most units if need are free now, and
// returns 0 otherwise.
func (l *Pool) TryAcquire(need, most int) int {
	most = max(most, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.takeLocked(min(max(need, 1), most), most)
}

// takeLocked takes up to most units when at least need are free; l.mu
// must be held.
func (l *Pool) takeLocked(need, most int) int {
	free := l.limit - l.used
	if free < need {
		return 0
	}
	n := min(free, most)
	l.used += n
	return n
}

func (l *Pool) removeWaiter(ch chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, w := range l.waiters {
		if w.ch == ch {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			return
		}
	}
}

// Release gives back n units; it panics when more are released than
// were taken.
func (l *Pool) Release(n int) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	l.used -= n
	if l.used < 0 {
		l.mu.Unlock()
		panic("bus: limiter released more than acquired")
	}
	l.wakeLocked()
	l.mu.Unlock()
}

// wakeLocked wakes the waiters whose need is now free.
func (l *Pool) wakeLocked() {
	if len(l.waiters) == 0 {
		return
	}
	free := l.limit - l.used
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		if free >= w.need {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	clear(l.waiters[len(kept):])
	l.waiters = kept
}

// InUse returns the units held now.
func (l *Pool) InUse() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used
}

// Limit returns the current limit.
func (l *Pool) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// SetLimit changes the limit; units held over it are given back as they
// are released.
func (l *Pool) SetLimit(n int) {
	l.mu.Lock()
	l.limit = n
	l.wakeLocked()
	l.mu.Unlock()
}

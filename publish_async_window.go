package bus

import (
	"context"
	"sync"
)

// asyncWindow bounds the PublishAsync messages of a Bus whose result is
// not known. A PublishAsync that finds it full waits until a share of it
// (wake slots) is free again: a producer ahead of a backend that
// completes message by message is woken once per share, not once per
// message. It is safe for concurrent use.
type asyncWindow struct {
	mu   sync.Mutex
	size int
	wake int
	used int
	// room is closed once wake slots are free, made by the first call
	// that waits for them; while it is set, every call waits for them.
	room chan struct{}
}

func newAsyncWindow(size, wake int) *asyncWindow {
	return &asyncWindow{size: size, wake: min(max(1, wake), size)}
}

// acquire takes a slot, waiting until ctx ends.
func (w *asyncWindow) acquire(ctx context.Context) error {
	w.mu.Lock()
	for w.used >= w.size || w.room != nil {
		if w.room == nil {
			w.room = make(chan struct{})
		}
		room := w.room
		w.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
	w.used++
	w.mu.Unlock()
	return nil
}

// release gives back n slots.
func (w *asyncWindow) release(n int) {
	w.mu.Lock()
	w.used -= n
	if w.room != nil && w.size-w.used >= w.wake {
		close(w.room)
		w.room = nil
	}
	w.mu.Unlock()
}

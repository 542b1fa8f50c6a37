package bus

import "sync"

// inflight counts the operations in progress on a Bus (publishes,
// subscribes being set up, background closes) without holding any lock
// across them: enter and leave take a mutex only to count. After close no
// operation enters, and the channel close returned is closed once the
// last one has left. Close waits on it with its ctx, so a slow backend
// call never blocks Close past its deadline, and no Publish ever holds up
// a Subscribe, a cancel or a Close.
type inflight struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{}
}

// enter starts an operation; it reports false once close was called.
func (t *inflight) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.n++
	return true
}

// join starts an operation on behalf of one that is in progress (so
// close cannot have found the bus idle); unlike enter it succeeds after
// close.
func (t *inflight) join() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

// leave ends an operation that entered or joined.
func (t *inflight) leave() { t.leaveN(1) }

// leaveN ends n operations that entered or joined.
func (t *inflight) leaveN(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n -= n
	if t.closed && t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

// isClosed reports whether close was called.
func (t *inflight) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// close refuses new operations and returns a channel closed when none is
// left in progress. The first call reports first=true.
func (t *inflight) close() (idle <-chan struct{}, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	first = !t.closed
	t.closed = true
	ch := make(chan struct{})
	if t.n == 0 {
		close(ch)
		return ch, first
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	return t.idle, first
}

// Join and Leave let the publish coalescer count its background batches
// (coalesce.Tracker).
func (t *inflight) Join()  { t.join() }
func (t *inflight) Leave() { t.leave() }

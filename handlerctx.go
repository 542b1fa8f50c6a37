package bus

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// handlerCtx is the ctx of one handler call under a lease. It behaves as
// context.WithCancelCause(parent) cancelled when the handler returns, or
// with cause ErrLeaseLost when the lease cannot be kept, and it ends when
// parent ends (Close). It lives inside its Delivery, so it costs no
// allocation: the real cancelCtx, its cancel func and its registration
// with parent are only made when something needs them, which is a call to
// Done (a select on the ctx, a derived ctx such as context.WithTimeout) or
// a cancellation with a cause. A quick handler that never waits on its ctx
// runs without any of them. It is safe for concurrent use.
type handlerCtx struct {
	parent context.Context
	mu     sync.Mutex // serializes materialize, end and lose
	inner  atomic.Pointer[cancelCause]
	ended  atomic.Bool
}

// cancelCause is a materialized handler ctx.
type cancelCause struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

var _ context.Context = (*handlerCtx)(nil)

// Deadline implements context.Context: the parent's.
func (c *handlerCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done implements context.Context.
func (c *handlerCtx) Done() <-chan struct{} {
	if in := c.inner.Load(); in != nil {
		return in.ctx.Done()
	}
	return c.materialize().ctx.Done()
}

// Err implements context.Context.
func (c *handlerCtx) Err() error {
	if in := c.inner.Load(); in != nil {
		return in.ctx.Err()
	}
	if c.ended.Load() {
		return context.Canceled
	}
	return c.parent.Err()
}

// Value implements context.Context. Once materialized, the values come
// through the real cancelCtx, which is how context.Cause finds the cause.
// Before that the ctx was not cancelled by itself: Cause falls back to
// the parent's, or to Err, which is what it returns for a cancelCtx
// cancelled without a cause.
func (c *handlerCtx) Value(key any) any {
	if in := c.inner.Load(); in != nil {
		return in.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// String names the ctx like the context package does.
func (c *handlerCtx) String() string { return "bus.handlerCtx" }

// materialize makes the real cancelCtx, cancelled at once when the handler
// has already returned.
func (c *handlerCtx) materialize() *cancelCause {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.materializeLocked()
}

func (c *handlerCtx) materializeLocked() *cancelCause {
	if in := c.inner.Load(); in != nil {
		return in
	}
	ctx, cancel := context.WithCancelCause(c.parent)
	in := &cancelCause{ctx: ctx, cancel: cancel}
	if c.ended.Load() {
		cancel(nil)
	}
	c.inner.Store(in)
	return in
}

// end cancels the ctx because the handler returned.
func (c *handlerCtx) end() {
	c.mu.Lock()
	c.ended.Store(true)
	in := c.inner.Load()
	c.mu.Unlock()
	if in != nil {
		in.cancel(nil)
	}
}

// lose cancels the ctx with cause while the handler runs. It reports
// false, and does nothing, when the handler has already returned.
func (c *handlerCtx) lose(cause error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended.Load() {
		return false
	}
	c.materializeLocked().cancel(cause)
	return true
}

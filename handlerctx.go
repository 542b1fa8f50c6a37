package bus

import (
	"context"
	"time"
)

// handlerCtx is a Delivery seen as the ctx of its handler call, when the
// handler runs under a lease: (*handlerCtx)(d). It behaves as
// context.WithCancelCause(s.handlerCtx) cancelled when the handler
// returns, or with cause ErrLeaseLost when the lease cannot be kept, and
// it ends when the subscription cancels its handlers (Close).
//
// It costs no allocation of its own: it lives in the Delivery, and the
// real cancelCtx, its cancel func and its registration with the parent
// are only made when something needs them, which is a call to Done (a
// select on the ctx, a derived ctx such as context.WithTimeout) or a
// cancellation with a cause. A quick handler that never waits on its ctx
// runs without any of them. It is safe for concurrent use.
type handlerCtx Delivery

// cancelCause is a handler ctx once made.
type cancelCause struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

var _ context.Context = (*handlerCtx)(nil)

func (c *handlerCtx) parent() context.Context { return c.sub.handlerCtx }

func (c *handlerCtx) ended() bool { return c.state.Load()&stateCtxEnded != 0 }

// Deadline implements context.Context: the parent's.
func (c *handlerCtx) Deadline() (time.Time, bool) { return c.parent().Deadline() }

// Done implements context.Context.
func (c *handlerCtx) Done() <-chan struct{} {
	if in := c.ctx.Load(); in != nil {
		return in.ctx.Done()
	}
	return c.make().ctx.Done()
}

// Err implements context.Context.
func (c *handlerCtx) Err() error {
	if in := c.ctx.Load(); in != nil {
		return in.ctx.Err()
	}
	if c.ended() {
		return context.Canceled
	}
	return c.parent().Err()
}

// Value implements context.Context. Once made, the values come through
// the real cancelCtx, which is how context.Cause finds a cause. Before
// that the ctx was not cancelled with a cause of its own, and Cause falls
// back to the parent's, or to Err: what it returns for a cancelCtx
// cancelled without a cause.
func (c *handlerCtx) Value(key any) any {
	if in := c.ctx.Load(); in != nil {
		return in.ctx.Value(key)
	}
	return c.parent().Value(key)
}

// String names the ctx, as the context package's do.
func (c *handlerCtx) String() string { return "bus.handlerCtx" }

// make makes the real cancelCtx, cancelled at once when the handler has
// returned.
func (c *handlerCtx) make() *cancelCause {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.makeLocked()
}

func (c *handlerCtx) makeLocked() *cancelCause {
	if in := c.ctx.Load(); in != nil {
		return in
	}
	ctx, cancel := context.WithCancelCause(c.parent())
	in := &cancelCause{ctx: ctx, cancel: cancel}
	c.ctx.Store(in)
	// end sets the bit, then loads ctx: it cancels what is stored by now,
	// or this sees the bit.
	if c.ended() {
		cancel(nil)
	}
	return in
}

// end cancels the ctx because the handler returned. It takes no lock.
func (c *handlerCtx) end() {
	c.state.Or(stateCtxEnded)
	if in := c.ctx.Load(); in != nil {
		in.cancel(nil)
	}
}

// lose cancels the ctx with cause while the handler runs. It reports
// false, and does nothing, when the handler has already returned.
func (c *handlerCtx) lose(cause error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended() {
		return false
	}
	c.makeLocked().cancel(cause)
	return true
}

// monoEpoch is the origin of monoNow.
var monoEpoch = time.Now()

// monoNow reads the monotonic clock as nanoseconds since monoEpoch: a
// time that fits a Delivery in 8 bytes with no pointer.
func monoNow() int64 { return int64(time.Since(monoEpoch)) }

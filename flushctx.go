package bus

import (
	"context"
	"sync/atomic"
	"time"
)

// flushCtx is the ctx of one chunk of an ack flush: its parent with a
// deadline ackFlushTimeout away. It behaves as
// context.WithDeadline(parent, deadline), cancelled when the chunk's Ack
// returns (end), but the real ctx, its timer and its registration with
// the parent are only made when the backend needs them, which is a call
// to Done (a select on the ctx, a derived ctx, an I/O call that watches
// it). A backend whose Ack never waits, as the memory broker's, costs no
// allocation but the flushCtx and no timer. It is safe for concurrent
// use, without a lock: the real ctx is installed with a compare-and-swap.
type flushCtx struct {
	parent   context.Context
	deadline time.Time
	ended    atomic.Bool
	made     atomic.Pointer[madeCtx]
}

// madeCtx is a flushCtx's real ctx once made.
type madeCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
}

// newFlushCtx returns the ctx of a flush chunk that starts now.
func newFlushCtx(parent context.Context) *flushCtx {
	return &flushCtx{parent: parent, deadline: time.Now().Add(ackFlushTimeout)}
}

// Deadline implements context.Context: the earlier of the parent's and
// the chunk's.
func (c *flushCtx) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done implements context.Context.
func (c *flushCtx) Done() <-chan struct{} { return c.make().ctx.Done() }

// Err implements context.Context.
func (c *flushCtx) Err() error {
	if m := c.made.Load(); m != nil {
		return m.ctx.Err()
	}
	if c.ended.Load() {
		return context.Canceled
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value implements context.Context. Once made, the values come through
// the real ctx, which is how context.Cause finds a cause.
func (c *flushCtx) Value(key any) any {
	if m := c.made.Load(); m != nil {
		return m.ctx.Value(key)
	}
	return c.parent.Value(key)
}

// String names the ctx, as the context package's do.
func (c *flushCtx) String() string { return "bus.flushCtx" }

// make makes the real ctx, cancelled at once when the chunk has ended.
// Of two concurrent calls one installs its ctx; the other cancels its
// own and uses the installed one.
func (c *flushCtx) make() *madeCtx {
	if m := c.made.Load(); m != nil {
		return m
	}
	ctx, cancel := context.WithDeadline(c.parent, c.deadline)
	m := &madeCtx{ctx: ctx, cancel: cancel}
	if !c.made.CompareAndSwap(nil, m) {
		cancel()
		return c.made.Load()
	}
	// end sets ended, then loads made: it cancels what is stored by now,
	// or this sees ended.
	if c.ended.Load() {
		cancel()
	}
	return m
}

// end cancels the ctx because the chunk's Ack returned.
func (c *flushCtx) end() {
	c.ended.Store(true)
	if m := c.made.Load(); m != nil {
		m.cancel()
	}
}

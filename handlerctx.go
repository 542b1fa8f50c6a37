package bus

import (
	"context"
	"time"

	"github.com/eventbus-go/bus/internal/lifecycle"
)

// handlerCtx is a Delivery seen as the ctx of its handler call, when the
// handler runs under a lease: (*handlerCtx)(d). It behaves as
// context.WithCancelCause(s.handlerCtx) cancelled when the handler
// returns, or with cause ErrLeaseLost when the lease cannot be kept, and
// it ends when the subscription cancels its handlers (cause ErrClosing).
//
// It costs no allocation of its own: it lives in the Delivery, and the
// real cancelCtx, its cancel func and its registration with the parent
// are only made when something needs them, which is a call to Done (a
// select on the ctx, a derived ctx such as context.WithTimeout) or a
// cancellation with a cause. A quick handler that never waits on its ctx
// runs without any of them. It is safe for concurrent use, without a
// lock: the real ctx is installed with a compare-and-swap.
type handlerCtx record

// cancelCause is a handler ctx once made (ctx set), and the value the
// subscription's decoder made of the delivery (val), which a typed
// subscription stores here before its handler runs (see
// Delivery.decoded): the common delivery, neither typed nor waited on,
// has no cancelCause at all. A cancelCause is never changed once
// stored; a new one replaces it.
type cancelCause struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	val    any
}

// made returns c's ctx once made, nil before.
func (c *handlerCtx) made() *cancelCause {
	if in := c.ctx.Load(); in != nil && in.ctx != nil {
		return in
	}
	return nil
}

// setDecoded stores v, the decoder's value of the delivery, keeping the
// ctx if one was made meanwhile (by the lease keeper).
func (c *handlerCtx) setDecoded(v any) {
	for {
		old := c.ctx.Load()
		in := &cancelCause{val: v}
		if old != nil {
			in.ctx, in.cancel = old.ctx, old.cancel
		}
		if c.ctx.CompareAndSwap(old, in) {
			return
		}
	}
}

// decoded returns what setDecoded stored, nil when nothing was.
func (c *handlerCtx) decoded() any {
	if in := c.ctx.Load(); in != nil {
		return in.val
	}
	return nil
}

func (c *handlerCtx) parent() context.Context { return c.sub.handlerCtx }

func (c *handlerCtx) ended() bool { return c.state.Load()&stateCtxEnded != 0 }

// Deadline implements context.Context: the parent's.
func (c *handlerCtx) Deadline() (time.Time, bool) { return c.parent().Deadline() }

// Done implements context.Context.
func (c *handlerCtx) Done() <-chan struct{} {
	if in := c.made(); in != nil {
		return in.ctx.Done()
	}
	return c.make().ctx.Done()
}

// Err implements context.Context.
func (c *handlerCtx) Err() error {
	if in := c.made(); in != nil {
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
	if in := c.made(); in != nil {
		return in.ctx.Value(key)
	}
	return c.parent().Value(key)
}

// String names the ctx, as the context package's do.
func (c *handlerCtx) String() string { return "bus.handlerCtx" }

// make makes the real cancelCtx, cancelled at once when the handler has
// returned. Of two concurrent calls one installs its ctx; the other
// cancels its own (which unregisters it from the parent) and uses the
// installed one.
func (c *handlerCtx) make() *cancelCause {
	old := c.ctx.Load()
	if old != nil && old.ctx != nil {
		return old
	}
	ctx, cancel := context.WithCancelCause(c.parent())
	in := &cancelCause{ctx: ctx, cancel: cancel}
	if old != nil {
		in.val = old.val
	}
	if !c.ctx.CompareAndSwap(old, in) {
		// Another make installed its ctx, or setDecoded its value:
		// start over from what is stored now.
		cancel(nil)
		return c.make()
	}
	// end sets the bit, then loads ctx: it cancels what is stored by now,
	// or this sees the bit.
	if c.ended() {
		cancel(nil)
	}
	return in
}

// end cancels the ctx because the handler returned.
func (c *handlerCtx) end() {
	c.state.Or(stateCtxEnded)
	if in := c.made(); in != nil {
		in.cancel(nil)
	}
}

// lose cancels the ctx with cause while the handler runs. It reports
// false, and does nothing, when the handler has already returned.
func (c *handlerCtx) lose(cause error) bool {
	if c.ended() {
		return false
	}
	in := c.make()
	in.cancel(cause)
	// The handler may have returned meanwhile: the cause is then not ours.
	return context.Cause(in.ctx) == cause
}

// monoEpoch is the origin of monoNow: that of the lifecycle events'
// clock, so that a reading stamps an event as it is (Event.Mono).
var monoEpoch = lifecycle.Epoch

// monoNow reads the monotonic clock as nanoseconds since monoEpoch: a
// time that fits a Delivery in 8 bytes with no pointer.
func monoNow() int64 { return int64(time.Since(monoEpoch)) }

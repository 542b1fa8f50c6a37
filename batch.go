package bus

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// BatchHandler handles a batch of deliveries of one subscription
// (SubscribeBatch). It may settle each delivery itself (Ack, Nack,
// Reject, Snooze), in any order; its return value settles the ones it
// left unsettled as a Handler's settles its delivery: nil acks them in
// AckOnSuccess, an error retries them with backoff (or dead-letters them
// when it is a Reject error or they reached max deliveries), and in AckManual
// they stay unsettled. ds is never empty and is the handler's own; the
// deliveries are in the order they arrived.
type BatchHandler func(ctx context.Context, ds []*Delivery) error

// Defaults of WithBatch.
const (
	DefaultBatchMax  = 100
	DefaultBatchWait = 100 * time.Millisecond
)

// WithBatch bounds the batches of a SubscribeBatch subscription: a batch
// is handed to the handler once it holds max deliveries, or wait after
// its first delivery arrived, whichever comes first (defaults
// DefaultBatchMax and DefaultBatchWait). max is 1..100000 and wait
// positive; Subscribe refuses the option (it has no batches).
func WithBatch(max int, wait time.Duration) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if max < 1 || max > maxInFlightUpperBound {
			return fmt.Errorf("%w: batch max %d, want 1..%d", ErrInvalidOption, max, maxInFlightUpperBound)
		}
		if wait <= 0 {
			return fmt.Errorf("%w: batch wait %v, want > 0", ErrInvalidOption, wait)
		}
		s.batchMax, s.batchWait, s.batchSet = max, wait, true
		return nil
	})
}

// batchOption marks a subscription made by SubscribeBatch.
type batchOption struct{}

func (batchOption) applySubscribe(s *subscribeOptions) error {
	s.batching = true
	return nil
}

// SubscribeBatch starts h on topic, handing it the deliveries in batches
// (see WithBatch), with the options and every rule of Subscribe: each
// delivery of a batch holds its in-flight slot and has its lease kept
// alive until the batch handler returns, WithHandlerTimeout bounds each
// delivery from its arrival, and with WithKeyOrdering a batch holds at
// most one delivery of a key: the next one of the key waits until the
// batch that holds its predecessor has settled it. A batch needs an
// in-flight slot per delivery: without WithMaxInFlight the in-flight
// bound is raised to the batch max, and a smaller WithMaxInFlight is
// refused.
//
// The batch's ctx carries the values of its first delivery's, has the
// earliest deadline of its deliveries' (WithHandlerTimeout), and ends as
// soon as the ctx of any of its deliveries ends (a handler timeout, a
// lost lease, a shutdown that cancels handlers), with that ctx's cause.
// Close lets a filling batch wait out its wait bound and run, as it lets
// any running handler finish within its ctx. Middleware runs around each
// delivery, not around the batch.
func (b *Bus) SubscribeBatch(ctx context.Context, topic string, h BatchHandler, opts ...SubscribeOption) (*Subscription, error) {
	if h == nil {
		return nil, fmt.Errorf("bus: subscribe %q: %w: nil batch handler", topic, ErrInvalidOption)
	}
	bt := &batcher{h: h}
	opts = append(opts[:len(opts):len(opts)], batchOption{}, batcherOption{bt})
	return b.Subscribe(ctx, topic, bt.handle, opts...)
}

// batcherOption hands the validated bounds to the batcher.
type batcherOption struct{ bt *batcher }

func (o batcherOption) applySubscribe(s *subscribeOptions) error {
	s.batcher = o.bt
	return nil
}

// batcher gathers the deliveries of a subscription, each on the handler
// goroutine the engine runs it on, into batches: the first delivery of a
// batch leads it (waits for it to fill, runs the batch handler), the
// others wait for its outcome. It is safe for concurrent use.
type batcher struct {
	h       BatchHandler
	max     int
	wait    time.Duration
	mu      sync.Mutex
	filling *batch // the batch taking deliveries; nil when none
}

// batch is one batch: items is fixed once it is cut (full or led);
// errs, set before done is closed, is what each item's handler returns.
type batch struct {
	items []batchItem
	full  chan struct{}
	done  chan struct{}
	errs  []error
}

type batchItem struct {
	ctx context.Context
	d   *Delivery
}

// handle is the subscription's Handler: it adds d to the filling batch
// and returns what the batch settles d with.
func (b *batcher) handle(ctx context.Context, d *Delivery) error {
	b.mu.Lock()
	bt := b.filling
	lead := bt == nil
	if lead {
		bt = &batch{full: make(chan struct{}), done: make(chan struct{})}
		b.filling = bt
	}
	i := len(bt.items)
	bt.items = append(bt.items, batchItem{ctx: ctx, d: d})
	if len(bt.items) == b.max {
		b.filling = nil
		close(bt.full)
	}
	b.mu.Unlock()
	if lead {
		b.lead(ctx, bt)
	} else {
		<-bt.done
	}
	return bt.errs[i]
}

// lead waits until bt is full, its wait bound ends or the leader's ctx
// ends, cuts it and runs it.
func (b *batcher) lead(ctx context.Context, bt *batch) {
	t := time.NewTimer(b.wait)
	select {
	case <-bt.full:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	b.mu.Lock()
	if b.filling == bt {
		b.filling = nil
	}
	items := bt.items
	b.mu.Unlock()
	bt.errs = b.run(items)
	close(bt.done)
}

// run calls the batch handler on items and returns what each item's
// handler returns: nil for those the handler settled, its error for the
// others.
func (b *batcher) run(items []batchItem) []error {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(items[0].ctx))
	defer cancel(nil)
	ds := make([]*Delivery, len(items))
	var deadline time.Time
	for i, it := range items {
		ds[i] = it.d
		if dl, ok := it.ctx.Deadline(); ok && (deadline.IsZero() || dl.Before(deadline)) {
			deadline = dl
		}
		stop := context.AfterFunc(it.ctx, func() { cancel(context.Cause(it.ctx)) })
		defer stop()
	}
	if !deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadline(ctx, deadline)
		defer cancelDeadline()
	}
	err := b.call(ctx, ds)
	errs := make([]error, len(items))
	for i, it := range items {
		if it.d.rec == nil || !it.d.rec.claimed() {
			errs[i] = err
		}
	}
	return errs
}

// call runs the batch handler, turning a panic into the error the
// engine reports for a handler's panic.
func (b *batcher) call(ctx context.Context, ds []*Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return b.h(ctx, ds)
}

// batchBounds applies WithBatch's bounds, or their defaults, to a
// SubscribeBatch subscription's batcher and in-flight bound.
func (o *subscribeOptions) batchBounds() error {
	if !o.batching {
		if o.batchSet {
			return fmt.Errorf("%w: WithBatch bounds the batches of SubscribeBatch; Subscribe hands deliveries one at a time", ErrInvalidOption)
		}
		return nil
	}
	if !o.batchSet {
		o.batchMax, o.batchWait = DefaultBatchMax, DefaultBatchWait
	}
	if !o.maxInFlightSet && o.autoscaleMax == 0 {
		o.maxInFlight = max(o.maxInFlight, o.batchMax)
	}
	if o.maxInFlight < o.batchMax {
		return fmt.Errorf("%w: a batch of %d needs as many in-flight slots; the in-flight bound is %d", ErrInvalidOption, o.batchMax, o.maxInFlight)
	}
	o.batcher.max, o.batcher.wait = o.batchMax, o.batchWait
	return nil
}

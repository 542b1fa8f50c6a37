package bus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// leaseKeeper keeps the leases of running handlers alive. One goroutine
// per subscription wakes every quarter of the ack timeout and extends,
// through backend.Extender, each lease that was not renewed since the last
// tick; a message whose handler is still working is then never delivered
// again while it runs. When a lease cannot be kept (no Extender, an
// extension failed, or WithMaxExtension was reached) the handler's ctx is
// cancelled with cause ErrLeaseLost while at least a quarter of the lease
// is left, before the backend can deliver the message again, and
// ScopeLease is reported once. It costs nothing per message: a tick walks
// the dispatcher's workers to find the running handlers, and the state it
// keeps for each lives in its Delivery.
type leaseKeeper struct {
	s      *Subscription
	ext    backend.Extender // nil when the backend cannot extend leases
	period time.Duration    // a quarter of the ack timeout
	max    time.Duration    // WithMaxExtension

	mu    sync.Mutex // guards the keptLease of every delivery
	stop  chan struct{}
	calls sync.WaitGroup // extensions in progress
	buf   []*Delivery    // the running deliveries of a tick, reused
}

// keptLease is what the keeper knows of a delivery whose handler runs;
// its fields are guarded by leaseKeeper.mu. The lease was granted when
// the delivery was received (Delivery.received).
type keptLease struct {
	renewed   time.Time // start of the current lease; zero: received
	extending bool
	lost      bool
}

// newLeaseKeeper returns the keeper of s, or nil when no handler of s runs
// under a lease (AckOnReceive acks before the handler, and an at-most-once
// backend has no lease to lose).
func newLeaseKeeper(s *Subscription) *leaseKeeper {
	if s.opts.ackMode == AckOnReceive || !s.caps.Redelivery {
		return nil
	}
	k := &leaseKeeper{s: s, period: s.opts.ackTimeout / 4, max: s.opts.maxExtension, stop: make(chan struct{})}
	k.ext, _ = s.bsub.(backend.Extender)
	return k
}

// renewed records a lease restarted by Delivery.Extend.
func (k *leaseKeeper) renewed(d *Delivery, at time.Time) {
	k.mu.Lock()
	if at.After(d.kept.renewed) {
		d.kept.renewed = at
	}
	k.mu.Unlock()
}

func (k *leaseKeeper) run() {
	t := time.NewTicker(k.period)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			k.calls.Wait()
			return
		case now := <-t.C:
			k.tick(now)
		}
	}
}

// close stops the keeper and waits for extensions in progress.
func (k *leaseKeeper) close() {
	close(k.stop)
}

func (k *leaseKeeper) tick(now time.Time) {
	timeout := k.s.opts.ackTimeout
	running := k.s.disp.running(k.buf[:0])
	var lost []observer.Event
	k.mu.Lock()
	for _, d := range running {
		l := &d.kept
		if l.lost || l.extending || d.hctx.ended.Load() {
			continue
		}
		renewed := l.renewed
		if renewed.IsZero() {
			renewed = d.received
		}
		age := now.Sub(renewed)
		if age < k.period {
			continue
		}
		switch {
		case k.ext != nil && now.Sub(d.received) < k.max:
			l.extending = true
			k.calls.Add(1)
			go k.extend(d)
		case age >= timeout/2:
			var cause error
			if k.ext == nil {
				cause = fmt.Errorf("%w: %s cannot extend leases and the handler ran for %v of its %v ack timeout", ErrLeaseLost, k.s.caps.Name, age.Round(time.Millisecond), timeout)
			} else {
				cause = fmt.Errorf("%w: the handler ran past the max extension of %v", ErrLeaseLost, k.max)
			}
			lost = k.loseLocked(lost, d, cause)
		}
	}
	k.mu.Unlock()
	clear(running)
	k.buf = running[:0]
	k.report(lost)
}

// extend renews one lease; on failure the handler's ctx is cancelled.
func (k *leaseKeeper) extend(d *Delivery) {
	defer k.calls.Done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.s.handlerCtx), k.period)
	err := d.extendLease(ctx)
	cancel()
	var lost []observer.Event
	k.mu.Lock()
	l := &d.kept
	l.extending = false
	switch {
	case d.hctx.ended.Load():
		// The handler returned meanwhile.
	case err != nil:
		lost = k.loseLocked(lost, d, fmt.Errorf("%w: extend: %w", ErrLeaseLost, err))
	default:
		l.renewed = time.Now()
	}
	k.mu.Unlock()
	k.report(lost)
}

// loseLocked cancels a handler whose lease cannot be kept and appends the
// event to report once k.mu is released; nothing when the handler has
// returned meanwhile.
func (k *leaseKeeper) loseLocked(lost []observer.Event, d *Delivery, cause error) []observer.Event {
	d.kept.lost = true
	if !d.hctx.lose(cause) {
		return lost
	}
	return append(lost, observer.Event{Scope: observer.ScopeLease, Topic: k.s.topic, Group: k.s.opts.group, MessageID: d.ID, Attempt: d.Attempt, Err: cause})
}

func (k *leaseKeeper) report(events []observer.Event) {
	for _, e := range events {
		k.s.bus.observe(e)
	}
}

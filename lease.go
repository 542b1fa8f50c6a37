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
// ScopeLease is reported once. It costs no timer per message: a delivery
// is only put in a map while its handler runs.
type leaseKeeper struct {
	s      *Subscription
	ext    backend.Extender // nil when the backend cannot extend leases
	period time.Duration    // a quarter of the ack timeout
	max    time.Duration    // WithMaxExtension

	mu      sync.Mutex
	running map[*Delivery]*keptLease
	stop    chan struct{}
	calls   sync.WaitGroup // extensions in progress
}

type keptLease struct {
	received  time.Time // when the handler started
	renewed   time.Time // start of the current lease
	cancel    context.CancelCauseFunc
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
	k := &leaseKeeper{
		s: s, period: s.opts.ackTimeout / 4, max: s.opts.maxExtension,
		running: map[*Delivery]*keptLease{}, stop: make(chan struct{}),
	}
	k.ext, _ = s.bsub.(backend.Extender)
	return k
}

// start registers a handler that begins now under a lease granted at
// received; cancel ends its ctx.
func (k *leaseKeeper) start(d *Delivery, received time.Time, cancel context.CancelCauseFunc) {
	k.mu.Lock()
	k.running[d] = &keptLease{received: received, renewed: received, cancel: cancel}
	k.mu.Unlock()
}

// done unregisters a handler that returned.
func (k *leaseKeeper) done(d *Delivery) {
	k.mu.Lock()
	delete(k.running, d)
	k.mu.Unlock()
}

// renewed records a lease restarted by Delivery.Extend.
func (k *leaseKeeper) renewed(d *Delivery, at time.Time) {
	k.mu.Lock()
	if l := k.running[d]; l != nil && at.After(l.renewed) {
		l.renewed = at
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
	var lost []observer.Event
	k.mu.Lock()
	defer func() {
		k.mu.Unlock()
		k.report(lost)
	}()
	for d, l := range k.running {
		if l.lost || l.extending {
			continue
		}
		age := now.Sub(l.renewed)
		if age < k.period {
			continue
		}
		switch {
		case k.ext != nil && now.Sub(l.received) < k.max:
			l.extending = true
			k.calls.Add(1)
			go k.extend(d, l)
		case age >= timeout/2:
			var cause error
			if k.ext == nil {
				cause = fmt.Errorf("%w: %s cannot extend leases and the handler ran for %v of its %v ack timeout", ErrLeaseLost, k.s.caps.Name, age.Round(time.Millisecond), timeout)
			} else {
				cause = fmt.Errorf("%w: the handler ran past the max extension of %v", ErrLeaseLost, k.max)
			}
			lost = append(lost, k.loseLocked(d, l, cause))
		}
	}
}

// extend renews one lease; on failure the handler's ctx is cancelled.
func (k *leaseKeeper) extend(d *Delivery, l *keptLease) {
	defer k.calls.Done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.s.handlerCtx), k.period)
	err := d.extendLease(ctx)
	cancel()
	var lost []observer.Event
	k.mu.Lock()
	l.extending = false
	switch {
	case k.running[d] != l:
		// The handler returned meanwhile.
	case err != nil:
		lost = append(lost, k.loseLocked(d, l, fmt.Errorf("%w: extend: %w", ErrLeaseLost, err)))
	default:
		l.renewed = time.Now()
	}
	k.mu.Unlock()
	k.report(lost)
}

// loseLocked cancels a handler whose lease cannot be kept and returns the
// event to report once k.mu is released.
func (k *leaseKeeper) loseLocked(d *Delivery, l *keptLease, cause error) observer.Event {
	l.lost = true
	l.cancel(cause)
	return observer.Event{Scope: observer.ScopeLease, Topic: k.s.topic, Group: k.s.opts.group, MessageID: d.ID, Attempt: d.Attempt, Err: cause}
}

func (k *leaseKeeper) report(events []observer.Event) {
	for _, e := range events {
		k.s.bus.observe(e)
	}
}

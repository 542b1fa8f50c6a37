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

// keptLease is what the keeper knows of a delivery whose handler runs,
// once it had to act on it (most handlers return well before); it lives
// in the delivery's deliveryExt and is guarded by leaseKeeper.mu. The
// lease was granted when the delivery was received (Delivery.received).
type keptLease struct {
	renewed   int64 // start of the current lease (monoNow); 0: received
	extending bool
	lost      bool
}

// keptOf returns the keeper's record of d, or nil when it has none;
// create makes it.
func keptOf(d *Delivery, create bool) *keptLease {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ext == nil && !create {
		return nil
	}
	return &d.extLocked().kept
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

// renewed records a lease restarted by Delivery.Extend at at (monoNow).
func (k *leaseKeeper) renewed(d *Delivery, at int64) {
	l := keptOf(d, true)
	k.mu.Lock()
	l.renewed = max(l.renewed, at)
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
		case <-t.C:
			k.tick(monoNow())
		}
	}
}

// close stops the keeper and waits for extensions in progress.
func (k *leaseKeeper) close() {
	close(k.stop)
}

func (k *leaseKeeper) tick(now int64) {
	timeout := k.s.opts.ackTimeout
	period := int64(k.period)
	running := k.s.disp.running(k.buf[:0])
	var lost []observer.Event
	for _, d := range running {
		hc := (*handlerCtx)(d)
		if hc.ended() || now-d.received < period {
			continue
		}
		l := keptOf(d, true)
		k.mu.Lock()
		renewed := max(l.renewed, d.received)
		age := time.Duration(now - renewed)
		switch {
		case l.lost || l.extending || age < k.period:
		case k.ext != nil && time.Duration(now-d.received) < k.max:
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
			lost = k.loseLocked(lost, d, l, cause)
		}
		k.mu.Unlock()
	}
	clear(running)
	k.buf = running[:0]
	k.report(lost)
}

// extend renews one lease; on failure the handler's ctx is cancelled.
func (k *leaseKeeper) extend(d *Delivery, l *keptLease) {
	defer k.calls.Done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.s.handlerCtx), k.period)
	start := monoNow()
	err := d.extendLease(ctx)
	cancel()
	var lost []observer.Event
	k.mu.Lock()
	l.extending = false
	switch {
	case (*handlerCtx)(d).ended():
		// The handler returned meanwhile.
	case err != nil:
		lost = k.loseLocked(lost, d, l, fmt.Errorf("%w: extend: %w", ErrLeaseLost, err))
	default:
		l.renewed = max(l.renewed, start)
	}
	k.mu.Unlock()
	k.report(lost)
}

// loseLocked cancels a handler whose lease cannot be kept and appends the
// event to report once k.mu is released; nothing when the handler has
// returned meanwhile.
func (k *leaseKeeper) loseLocked(lost []observer.Event, d *Delivery, l *keptLease, cause error) []observer.Event {
	l.lost = true
	if !(*handlerCtx)(d).lose(cause) {
		return lost
	}
	return append(lost, observer.Event{Scope: observer.ScopeLease, Topic: k.s.topic, Group: k.s.opts.group, MessageID: d.ID, Attempt: d.Attempt, Err: cause})
}

func (k *leaseKeeper) report(events []observer.Event) {
	for _, e := range events {
		k.s.bus.observe(e)
	}
}

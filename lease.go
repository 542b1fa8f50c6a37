package bus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// leaseKeeper keeps the leases of running handlers alive, and of
// deliveries whose settlement is still running. One goroutine
// per subscription wakes every quarter of the ack timeout and extends,
// through backend.Extender, each lease that was not renewed since the last
// tick; a message whose handler is still working is then never delivered
// again while it runs. When a lease cannot be kept (no Extender, an
// extension failed, or the max extension was reached) the handler's ctx
// is cancelled with cause ErrLeaseLost while at least a quarter of the
// lease is left, before the backend can deliver the message again, and
// ScopeLease is reported once. It costs nothing per message: a tick walks
// the dispatcher's workers to find the running handlers, and the state it
// keeps for each lives in its Delivery (guarded by the subscription's mu).
type leaseKeeper struct {
	s      *consumer
	ext    backend.Extender // nil when the backend cannot extend leases
	period time.Duration    // a quarter of the ack timeout
	max    time.Duration    // the max extension

	stop  chan struct{}
	calls sync.WaitGroup // extensions in progress
	buf   []*record      // the running deliveries of a tick, reused
}

// keptLease is what the keeper knows of a delivery whose handler runs,
// once it had to act on it (most handlers return well before). The lease
// was granted when the delivery was received (Delivery.received).
type keptLease struct {
	renewed   int64 // start of the current lease (monoNow); 0: received
	extending bool
	lost      bool
	// extended is closed when the extension under way returns; nil when
	// none is.
	extended chan struct{}
}

// newLeaseKeeper returns the keeper of s, or nil when no handler of s runs
// under a lease (AckOnReceive acks before the handler, and an at-most-once
// backend has no lease to lose).
func newLeaseKeeper(s *consumer) *leaseKeeper {
	if s.cfg.AckMode == AckOnReceive || !s.cfg.Caps.Redelivery {
		return nil
	}
	k := &leaseKeeper{s: s, period: s.cfg.AckTimeout / 4, max: s.cfg.MaxExtension, stop: make(chan struct{})}
	k.ext, _ = s.bsub.(backend.Extender)
	return k
}

// renewed records a lease restarted by Delivery.Extend at at (monoNow).
func (k *leaseKeeper) renewed(d *record, at int64) {
	k.s.mu.Lock()
	l := &d.extLocked().kept
	l.renewed = max(l.renewed, at)
	k.s.mu.Unlock()
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

// close stops the keeper; run waits for extensions in progress.
func (k *leaseKeeper) close() {
	close(k.stop)
}

func (k *leaseKeeper) tick(now int64) {
	running := k.s.disp.running(k.buf[:0])
	if k.s.keys != nil {
		running = k.s.keys.held(running)
	}
	fenced := k.s.owner != nil && k.s.owner.fenced()
	var lost []observer.Event
	for _, d := range running {
		if settledHere(d) || !fenced && now-d.received < int64(k.period) {
			continue
		}
		k.s.mu.Lock()
		if fenced {
			lost = k.fenceLocked(lost, d)
		} else {
			lost = k.checkLocked(lost, d, now)
		}
		k.s.mu.Unlock()
	}
	clear(running)
	k.buf = running[:0]
	k.report(lost)
}

// fence gives up the lease of every delivery the subscription runs or
// holds, at once, when its group lock was lost (errFenced). The owner
// calls it; the ticks that follow catch what was fetched meanwhile.
func (k *leaseKeeper) fence() {
	running := k.s.disp.running(nil)
	if k.s.keys != nil {
		running = k.s.keys.held(running)
	}
	var lost []observer.Event
	k.s.mu.Lock()
	for _, d := range running {
		if !(*handlerCtx)(d).ended() {
			lost = k.fenceLocked(lost, d)
		}
	}
	k.s.mu.Unlock()
	k.report(lost)
}

func (k *leaseKeeper) fenceLocked(lost []observer.Event, d *record) []observer.Event {
	if l := &d.extLocked().kept; !l.lost {
		return k.loseLocked(lost, d, l, errFenced)
	}
	return lost
}

// errFenced is the cause of a lease the subscription gives up because its
// group lock passed to another member: the deliveries it fetched under the
// lock are no longer extended, their handlers are cancelled, the waiting
// ones never reach a handler here, and each goes back to the group,
// uncounted, once the deliveries of its key before it did (see giveUp).
// This is the lock's fence: a member that lost the lock neither starts
// nor keeps alive anything of the group.
var errFenced = fmt.Errorf("%w: the group lock passed to another member", ErrLeaseLost)

// checkLocked extends the lease of a running handler that is due for it,
// or gives it up when it cannot be kept.
func (k *leaseKeeper) checkLocked(lost []observer.Event, d *record, now int64) []observer.Event {
	timeout := k.s.cfg.AckTimeout
	l := &d.extLocked().kept
	renewed := max(l.renewed, d.received)
	age := time.Duration(now - renewed)
	switch {
	case l.lost || l.extending || d.state.Load()&stateBack != 0 || age < k.period:
	case k.ext != nil && time.Duration(now-d.received) < k.max:
		l.extending = true
		l.extended = make(chan struct{})
		k.calls.Add(1)
		// The extension may take until a quarter of the current lease
		// is left (never less than a tick), so that a slow broker round
		// trip does not cost a lease that still has time.
		wait := max(time.Duration(renewed-now)+timeout*3/4, k.period)
		go k.extend(d, l, wait)
	case age >= timeout/2:
		var cause error
		if k.ext == nil {
			cause = fmt.Errorf("%w: %s cannot extend leases and the handler ran for %v of its %v ack timeout", ErrLeaseLost, k.s.cfg.Caps.Name, age.Round(time.Millisecond), timeout)
		} else {
			cause = fmt.Errorf("%w: the handler ran past the max extension of %v", ErrLeaseLost, k.max)
		}
		lost = k.loseLocked(lost, d, l, cause)
	}
	return lost
}

// settledHere reports whether d needs its lease no more: its handler
// returned and its settlement completed. A settlement still running (a
// dead-letter copy the broker is slow to confirm, say) keeps its lease
// alive, so that the message does not go back to the group meanwhile.
func settledHere(d *record) bool {
	return (*handlerCtx)(d).ended() && d.state.Load()&stateFinished != 0
}

// extend renews one lease within wait; on failure the handler's ctx is
// cancelled.
func (k *leaseKeeper) extend(d *record, l *keptLease, wait time.Duration) {
	defer k.calls.Done()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(k.s.handlerCtx), wait)
	start := monoNow()
	err := d.extendLease(ctx)
	cancel()
	var lost []observer.Event
	k.s.mu.Lock()
	l.extending = false
	close(l.extended)
	l.extended = nil
	switch {
	case err == nil:
		l.renewed = max(l.renewed, start)
	case (*handlerCtx)(d).ended():
		// The handler returned meanwhile: the delivery is settled or
		// being settled, and its settlement reports what fails.
	default:
		lost = k.loseLocked(lost, d, l, fmt.Errorf("%w: extend: %w", ErrLeaseLost, err))
	}
	k.s.mu.Unlock()
	k.report(lost)
}

// beforeGiveBack stops the keeper from extending d's lease and waits,
// within ctx, for an extension under way: a give-back must reach the
// broker after it, since an extension that came after it could take the
// message back from the group for a whole lease (or from the member that
// has it now).
func (d *record) beforeGiveBack(ctx context.Context) error {
	d.state.Or(stateBack)
	s := d.sub
	var extended chan struct{}
	s.mu.Lock()
	if x := d.ext.Load(); x != nil {
		extended = x.kept.extended
	}
	s.mu.Unlock()
	if extended == nil {
		return nil
	}
	select {
	case <-extended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("an extension of its lease is still under way: %w", context.Cause(ctx))
	}
}

// loseLocked cancels a handler whose lease cannot be kept and appends the
// event to report once the lock is released; nothing when the handler
// has returned meanwhile.
func (k *leaseKeeper) loseLocked(lost []observer.Event, d *record, l *keptLease, cause error) []observer.Event {
	l.lost = true
	if !(*handlerCtx)(d).lose(cause) {
		return lost
	}
	return append(lost, k.s.event(d, observer.ScopeLease, cause))
}

func (k *leaseKeeper) report(events []observer.Event) {
	for _, e := range events {
		k.s.observe(e)
	}
}

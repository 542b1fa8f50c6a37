package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// groupLock holds the group lock of a key-ordered subscription
// (backend.GroupLocker): the subscription fetches only while it holds the
// lock, so one member of the group at a time handles the topic's keys.
// It takes and renews the lock every sixth of its ttl (ownerTTL, a few
// seconds whatever the ack timeout).
//
// A subscription that takes the lock over from a member that let it lapse
// (it died or hung) starts once a fetch that member may have had under
// way is over (handoverSettle): when its backend lists the deliveries the
// group has pending (backend.PendingLister), it holds back the keys of
// those, each until its pending deliveries have come back (after their
// leases) and run here, in log order, and runs every other key at once
// (see inherit and keyLines.hold); a list that fails is asked for again
// every round. Without the list it waits handoverSettle and one ack
// timeout first (see drainedAt), so that what that member left unsettled,
// also what its last fetch was handed after it stopped, is back with the
// group, and is handed out, before anything after it. A subscription
// that takes a lock another member released while this one waited
// starts the same way, holding back the keys of what is pending then
// (without the list it waits at most handoverSettle and one ack timeout,
// less when nothing is pending): the releasing member's last fetch may
// have been handed a message as it closed, and a read it gave up on (the
// broker answered too late) may have taken some at the broker.
//
// A subscription that cannot renew for half the ttl, or finds another
// holder, stops fetching and fences itself: a Receive under way ends
// (what it was handed all the same lapses back), the handlers it runs
// are cancelled with ErrLeaseLost, no lease of its is extended and no
// handler started any more, and what it held goes back to the group in
// log order as each key's head returns, without counting an attempt (see
// leaseKeeper.fence). When it takes the lock again it does so as a
// takeover, whatever the broker reports (see ownerRound.lost). Close
// releases the lock after the subscription drained.
type groupLock struct {
	s      *consumer
	locker backend.GroupLocker
	holder string
	ttl    time.Duration

	mu     sync.Mutex
	open   chan struct{} // closed while the lock is held
	owning bool
	// held is the ctx of the Receives made while the lock is held: it
	// ends when the lock is lost, so that a fetch under way hands nothing
	// more to a member that no longer holds it.
	held       context.Context
	heldCancel context.CancelFunc
	// locked: the last round held the lock, owning or still waiting to
	// start (a takeover waiting for what the previous holder left).
	locked bool
	// none: the backend has no group lock after all (a wrapper that
	// reports ErrUnsupported); the subscription fetches without one.
	none bool

	// holdsState, holdsGen and loaders track the read of the held keys
	// (KeyHold) a member makes when it takes the lock (see holdsReady).
	holdsState int
	holdsGen   int
	loaders    sync.WaitGroup

	stop chan struct{}
	done chan struct{}
}

// ownerTTL is the ttl of a group lock: half the ack timeout, between 1 s
// and maxLockTTL. It does not grow with a longer ack timeout: a member
// that dies stops the group for about this long (see inherit).
func ownerTTL(ackTimeout time.Duration) time.Duration {
	return min(max(ackTimeout/2, time.Second), maxLockTTL)
}

// maxLockTTL is the longest ttl of a group lock, and of a member's place
// in a partitioned group.
const maxLockTTL = 3 * time.Second

// maxHolds is the most pending deliveries a takeover holds back (see
// inherit): with more, it waits as one without the list does (see
// drainedAt).
const maxHolds = 10000

func newGroupLock(s *consumer, l backend.GroupLocker) *groupLock {
	return &groupLock{s: s, locker: l, holder: s.cfg.LockHolder, ttl: ownerTTL(s.cfg.AckTimeout),
		open: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
}

// wait blocks until the lock is held and returns the ctx of a Receive
// under it; false when ctx ends first. The ctx is read once the gate
// opened: the one read before belongs to an earlier hold, ended when
// that was lost, and what a Receive under it is handed would be dropped
// (it lapses back to the group after its lease, behind the rest of its
// key).
func (o *groupLock) wait(ctx context.Context) (context.Context, bool) {
	for {
		o.mu.Lock()
		open := o.open
		o.mu.Unlock()
		select {
		case <-open:
			o.mu.Lock()
			held, same := o.held, o.open == open
			o.mu.Unlock()
			if same && held != nil {
				return held, true
			}
			// Lost again meanwhile: wait for the next hold.
		case <-ctx.Done():
			return nil, false
		}
	}
}

// run renews the lock every third of its ttl while it holds it, and
// tries again every waitPoll while it waits for it (a lock another member
// releases is taken within that).
func (o *groupLock) run() {
	defer close(o.done)
	t := time.NewTimer(0)
	defer t.Stop()
	var r ownerRound
	for {
		select {
		case <-t.C:
		case <-o.stop:
			return
		}
		if o.round(&r) {
			return
		}
		o.mu.Lock()
		owning := o.owning
		o.mu.Unlock()
		next := o.renewEvery()
		if !owning {
			next = min(next, waitPoll)
		}
		t.Reset(next)
	}
}

// renewEvery is how often the lock is taken or renewed, and how long one
// attempt may take: a sixth of the ttl, so that a broker that stops
// answering for up to about a third of the ttl (a paused server, a
// failover) costs no renewal before the half-ttl mark at which the holder
// fences itself.
func (o *groupLock) renewEvery() time.Duration { return o.ttl / 6 }

// waitPoll is how often a member that waits for a lock asks for it.
const waitPoll = 250 * time.Millisecond

// ownerRound is what the owner's rounds carry over.
type ownerRound struct {
	lastHeld time.Time // the last round that held the lock
	openAt   time.Time // when a takeover may start fetching; zero: none pending
	// other: a round found the lock held by another member since this
	// one last held it.
	other bool
	// settleAt: from then on a takeover may start early when nothing is
	// pending (see handoverSettle).
	settleAt time.Time
	// inherit: the takeover starts at openAt holding back the keys of
	// what the group has pending then (see inherit); takenAt is when it
	// took the lock.
	inherit bool
	takenAt time.Time
	// lost: this member held the lock and then stopped holding it (it
	// could not renew in time, or found another holder). Taking it again
	// is a takeover even when the broker does not call it one (the lock
	// never lapsed, or lapsed with this member as its last holder): the
	// holds it had are dropped and what it held went back, while what the
	// members before it left unsettled may still be out on its lease.
	lost bool
}

// handoverSettle is how long a member that took a lock waits before it
// trusts the broker's count of unsettled deliveries: a fetch the previous
// holder started before it stopped may still be handed a message at the
// broker for this long (Receive blocks about a second at most).
const handoverSettle = 1500 * time.Millisecond

// drainedAt is when everything the previous holder of a lock taken at
// takenAt left unsettled is back with the group, when nothing lists it:
// a message its last fetch was handed after it stopped (within
// handoverSettle) is leased from then for one ack timeout.
func (o *groupLock) drainedAt(takenAt time.Time) time.Time {
	return takenAt.Add(handoverSettle + o.s.cfg.AckTimeout)
}

// round takes or renews the lock once and opens or closes the gate. A
// takeover keeps the lock renewed while it waits its ack timeout. It
// reports true when the backend has no group lock after all: the gate is
// open for good.
func (o *groupLock) round(r *ownerRound) bool {
	ctx, cancel := context.WithTimeout(context.Background(), o.renewEvery())
	held, takeover, err := o.locker.LockGroup(ctx, o.s.cfg.Topic, o.s.cfg.Group, o.holder, o.ttl)
	cancel()
	now := time.Now()
	if errors.Is(err, ErrUnsupported) {
		o.mu.Lock()
		o.none = true
		o.mu.Unlock()
		for o.s.holds != nil && !o.s.learnHolds() && o.s.fetchCtx.Err() == nil {
			select {
			case <-o.stop:
				return true
			case <-time.After(waitPoll):
			}
		}
		o.setOwning(true)
		return true
	}
	if err != nil {
		err = fmt.Errorf("bus: group lock of a key-ordered subscription: %w", err)
		o.s.cfg.Health.lockFailed(err)
		o.s.observe(observer.Event{Scope: observer.ScopeLease, Topic: o.s.cfg.Topic, Group: o.s.cfg.Group, Err: err})
	}
	o.mu.Lock()
	owning := o.owning
	o.mu.Unlock()
	o.setLocked(held || err != nil && now.Sub(r.lastHeld) <= o.ttl/2)
	switch {
	case held:
		r.lastHeld = now
		takeover = takeover || r.lost && !owning
		r.lost = false
		// released: taken from a member that released it while this
		// one waited. What that member leaves unsettled (a delivery its
		// last fetch was handed as it closed, what a read it gave up on
		// took at the broker, an ack it could not flush) comes back
		// after its lease, as what a member that let the lock lapse
		// leaves does.
		released := !takeover && r.other && !owning && r.openAt.IsZero()
		if (takeover || released) && o.inherits() {
			// Once a fetch the previous holder may have had under way
			// at the broker is over, the keys of what it left unsettled
			// are held back until that comes back, and the others run
			// at once.
			r.inherit, r.takenAt = true, now
			r.openAt = now.Add(handoverSettle)
			r.settleAt = r.openAt
		} else if takeover || released {
			// Without the list: everything the previous holder left
			// comes back within an ack timeout, unless nothing is left.
			r.openAt = o.drainedAt(now)
			r.settleAt = now.Add(handoverSettle)
		}
		r.other = false
		if !owning && r.inherit && !now.Before(r.openAt) {
			switch {
			case !o.s.keys.idle() && now.Before(o.drainedAt(r.takenAt)):
				// What this member fetched under an earlier hold of
				// the lock, fenced, is still going back: the holds
				// are taken once it has (a record of it would stand
				// for a held delivery that is yet to come back).
				r.openAt = now.Add(waitPoll)
			case !o.s.keys.idle():
				r.inherit = false
				r.openAt = o.drainedAt(r.takenAt)
			default:
				listed, again := o.inherit()
				switch {
				case listed:
					r.inherit = false
				case again && now.Before(o.drainedAt(r.takenAt)):
					// The list failed (a slow broker): it is asked
					// for again next round, until the wait without
					// the list is over anyway (drainedAt).
					r.openAt = now.Add(waitPoll)
				default:
					r.inherit = false
					r.openAt = o.drainedAt(r.takenAt)
				}
			}
		}
		if owning && o.inherits() && o.s.keys.holdsDue(now) {
			o.recheck(now)
		}
		if !owning && now.Before(r.openAt) && !now.Before(r.settleAt) && o.nothingPending() {
			r.openAt, r.inherit = now, false
		}
		if !owning && !now.Before(r.openAt) && o.holdsReady() {
			r.openAt = time.Time{}
			o.setOwning(true)
		}
	case err == nil || now.Sub(r.lastHeld) > o.ttl/2:
		// Another member holds it, or it could not be renewed in time.
		r.other = r.other || err == nil
		r.lost = r.lost || !r.lastHeld.IsZero()
		r.openAt, r.inherit = time.Time{}, false
		o.setOwning(false)
		o.forgetHolds()
		if owning && o.s.keeper != nil {
			// Within five sixths of the ttl of the last renewal: the
			// leases given up now are given back, or lapse, while the
			// next holder, which starts after the ttl, holds back their
			// keys (or waits, see drainedAt).
			o.s.keeper.fence()
		}
		if owning && o.s.keys != nil {
			o.s.keys.dropHolds()
		}
	}
	return false
}

// inherits reports whether a takeover can hold back only the keys of
// what the group has pending (backend.PendingLister, key ordering).
func (o *groupLock) inherits() bool {
	_, ok := o.s.bsub.(backend.PendingLister)
	return ok && o.s.keys != nil
}

// inherit holds back the keys of the deliveries the group has pending,
// those the member before left unsettled, before this one starts
// fetching: each of those keys runs its pending deliveries first, in log
// order, as they come back after their leases. It reports false when the
// backend cannot list them all (an error, or more than maxHolds), and
// again when the list failed with an error worth asking again for (the
// takeover does so until drainedAt, which it otherwise waits for).
func (o *groupLock) inherit() (listed, again bool) {
	pl := o.s.bsub.(backend.PendingLister)
	ctx, cancel := context.WithTimeout(context.Background(), o.ttl/3)
	defer cancel()
	ps, complete, err := pl.PendingDeliveries(ctx, maxHolds)
	if err != nil && !errors.Is(err, ErrUnsupported) {
		o.s.observe(observer.Event{Scope: observer.ScopeLease, Topic: o.s.cfg.Topic, Group: o.s.cfg.Group,
			Err: fmt.Errorf("bus: list the deliveries a key-ordered group left pending: %w (asking again, for at most 1.5 s and one ack timeout)", err)})
		return false, true
	}
	if err != nil || !complete {
		return false, false
	}
	o.s.keys.hold(ps)
	return true, false
}

// recheck asks the broker again which held deliveries are pending, when
// one a key waits for has reached its lease end: those settled meanwhile
// no longer hold their key (see keyLines.recheck). A failure leaves the
// holds for the next round.
func (o *groupLock) recheck(now time.Time) {
	pl := o.s.bsub.(backend.PendingLister)
	ctx, cancel := context.WithTimeout(context.Background(), o.ttl/3)
	defer cancel()
	ps, complete, err := pl.PendingDeliveries(ctx, maxHolds)
	if err != nil || !complete {
		return
	}
	full := o.s.waits != nil && o.s.waits.InUse() >= o.s.waits.Limit()
	o.s.keys.recheck(ps, now, full)
}

// nothingPending reports whether the broker says the group has no
// unsettled delivery of the topic (backend.Inspector).
func (o *groupLock) nothingPending() bool {
	in, ok := o.s.bus.be.(backend.Inspector)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.ttl/3)
	defer cancel()
	g, known := groupInfo(ctx, in, o.s.cfg.Topic, o.s.cfg.Group)
	return known && g.Pending == 0
}

// fenced reports whether the subscription lost the lock it held (or
// does not hold it yet): nothing it fetched may be kept alive or started.
func (o *groupLock) fenced() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.owning && !o.none
}

// fetching reports whether the member holds the lock and fetches.
func (o *groupLock) fetching() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.owning
}

func (o *groupLock) setLocked(v bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.locked = v
}

func (o *groupLock) setOwning(v bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.owning == v {
		return
	}
	o.owning = v
	if v {
		o.held, o.heldCancel = context.WithCancel(o.s.fetchCtx)
		close(o.open)
	} else {
		o.heldCancel()
		o.open = make(chan struct{})
	}
}

// lapseTTL is what a closing member that holds the lock without having
// started, or that did not close cleanly, renews it for: it lapses at
// once, so that the next member takes it over without waiting out the
// ttl, and, as a takeover, waits for what the holder before was waiting
// for or left.
const lapseTTL = time.Millisecond

// close stops renewing and releases the lock (while ctx lasts); the
// subscription has drained. A member that holds the lock but has not
// started (it waits for the previous holder's unsettled deliveries), or
// whose close was not clean (an ack it could not flush, a delivery its
// backend could not give back, a key still waiting for a delivery the
// member before it left unsettled), lets it lapse instead of releasing
// it: a release would tell a member that asks for the lock later that
// nothing is left to wait for.
func (o *groupLock) close(ctx context.Context, clean bool) {
	close(o.stop)
	<-o.done
	o.loaders.Wait()
	o.mu.Lock()
	owning, waiting := o.owning && !o.none, o.locked && !o.owning && !o.none
	o.mu.Unlock()
	if waiting || owning && !clean {
		if _, _, err := o.locker.LockGroup(ctx, o.s.cfg.Topic, o.s.cfg.Group, o.holder, lapseTTL); err != nil {
			o.s.observe(observer.Event{Scope: observer.ScopeShutdown, Topic: o.s.cfg.Topic, Group: o.s.cfg.Group,
				Err: fmt.Errorf("bus: let the group lock lapse: %w (the next member waits for its ttl)", err)})
		}
	}
	if owning && clean {
		if err := o.locker.UnlockGroup(ctx, o.s.cfg.Topic, o.s.cfg.Group, o.holder); err != nil {
			o.s.observe(observer.Event{Scope: observer.ScopeShutdown, Topic: o.s.cfg.Topic, Group: o.s.cfg.Group,
				Err: fmt.Errorf("bus: release the group lock: %w (the next member waits for it to lapse)", err)})
		}
	}
}

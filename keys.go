package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// keyLines sequences the deliveries of each key (WithKeyOrdering: deliveries with the same Key): of the
// deliveries whose key is equal and non-empty, one at a time reaches a
// worker, in the order the backend handed them out; deliveries of other
// keys, and those without a key, run in parallel as usual.
//
// A key's head holds the key until it is done (settled and its handler
// returned). A head that is to be retried (an error in AckOnSuccess, a
// Nack in AckManual) is retried here, by a new delivery of the same
// message with Attempt+1 after the delay, instead of being handed back to
// the backend: the deliveries behind it are already here, and the retry
// must run before them. The lease of every held delivery, waiting behind
// its head or for its retry, is kept alive by the lease keeper; one whose
// lease is lost is given up when its turn comes, and its key waits for the
// backend to deliver it again (see lapseLocked).
//
// Waiting is not running. A head holds an in-flight slot, also while it
// waits for its retry. The deliveries behind a head hold a unit of the
// subscription's waiting set (consumerConfig.MaxWaiting) instead, marked
// stateWaiting: every fetched delivery comes with a unit, up to the free
// slots of them also with a slot (consumer.take), and admit gives back
// the unit of each that takes a slot. When a
// head is done, its slot goes on to the next delivery of its key, which
// gives back its unit (done): a key's turn never waits for a free slot,
// and a long backlog of one key, or a retrying head with deliveries
// behind it, leaves the other slots to the other keys. Only a full
// waiting set holds back fetching, never an unbounded buffer.
//
// A fetch may ask for more deliveries than it has free slots (see
// consumer.take), each beyond them holding a unit of the waiting set
// alone, so that a backlog behind a blocked head is passed in a few
// fetches. One of those that could run (no key, or the first of its key)
// waits for a slot instead, pending: it holds its key, if any, as a head
// that has not started, and the fetch loop runs it, oldest first, when a
// slot frees up, before it fetches more (consumer.runPending).
type keyLines struct {
	s *consumer

	mu    sync.Mutex
	lines map[string]*keyLine
	// pending holds the deliveries that wait for an in-flight slot,
	// oldest first, marked stateWaiting.
	pending []*record
	closed  bool
	// heldAtClose: when it closed, a key still waited for a delivery
	// the group handed out before this member took the lock (hold), so
	// the group has one unsettled that no member of it runs.
	heldAtClose bool
	// drain: after close, the deliveries waiting behind a head still run
	// in turn instead of going back, until the shutdown is forced (a
	// subscription with a group lock, see consumer.shutdown and draining).
	drain bool
	// prevs counts the lines whose retry waits for a nacking handler
	// (keyLine.prev), so that a handler's return looks only when one does.
	prevs atomic.Int32
}

// keyLine is one key's head (running, or waiting for its retry) and the
// deliveries behind it.
type keyLine struct {
	head    *record
	waiting []*record
	retry   *time.Timer // set while head waits for its retry
	due     time.Time   // when the retry runs
	// prev is the delivery head retries while its handler still runs (a
	// Nack from inside an AckManual handler): the retry waits for it.
	prev  *record
	ready bool // the retry's delay is over; it waits for prev
	// snoozed: the retry is a snooze, which does not count an attempt.
	snoozed bool
	// holds are the IDs of the key's deliveries that the group handed
	// out before this member took the group lock over and has not
	// settled, in log order (see keyLines.hold). Each runs before the
	// deliveries behind it, in that order; while the next one has not
	// come back the line has no head (an invisible one: nothing of the
	// key runs).
	holds []string
	// holdEnd is when the last of holds may be handed out again; zero
	// when unknown.
	holdEnd time.Time
}

// draining reports whether the deliveries waiting behind a head still
// run in turn after close: with drain set, until the shutdown is forced
// (the ctx of a Close ended). From then on they go back to the group, in
// order, instead of reaching handlers whose ctx is cancelled and whose
// acks the closing subscription may no longer flush.
func (k *keyLines) draining() bool { return k.drain && k.s.force.Err() == nil }

func newKeyLines(s *consumer) *keyLines {
	return &keyLines{s: s, lines: map[string]*keyLine{}}
}

// admit returns the deliveries of ds to run now, each taking one of the
// batch's slots, how many of those slots it used (also by those that go
// back), and how many of the others wait behind the head of their key.
// Every delivery that takes no slot is marked stateWaiting and keeps its
// unit of the waiting set: those behind the head of their key, and those
// that could run when the slots are used up, which wait for one
// (pending) or, after close, go back. After close a keyed delivery waits
// behind its key's head, to go back to the group after it, or goes back
// at once. In AckOnReceive a delivery is acked when it is admitted, so
// that one waiting for its key does not outlive its lease unacked.
func (k *keyLines) admit(ds []*record, slots int) (run []*record, used, waiting int) {
	run = make([]*record, 0, min(len(ds), slots))
	var back, keyed []*record
	k.mu.Lock()
	for _, d := range ds {
		key := d.pub.Key
		if key != "" {
			keyed = append(keyed, d)
		}
		l := k.lines[key]
		if l != nil && l.head == nil && !k.closed && len(l.holds) > 0 && l.holds[0] == d.pub.ID {
			// The held delivery the key waits for is back: it runs
			// (or waits for a slot) as the key's head.
			l.holds = l.holds[1:]
			l = nil
		}
		switch {
		case key != "" && l != nil:
			// Also after close: it goes back behind the ones before it.
			d.state.Or(stateWaiting)
			l.waiting = append(l.waiting, d)
			waiting++
		case key != "" && k.closed && !k.draining(), used == slots && k.closed:
			if used < slots {
				used++
			} else {
				d.state.Or(stateWaiting)
			}
			back = append(back, d)
		case used == slots:
			// No slot left: it waits for one, holding its key.
			d.state.Or(stateWaiting)
			if key != "" {
				k.setHead(key, d)
			}
			k.pending = append(k.pending, d)
		default:
			// Also while draining: a delivery the last fetch brought
			// is handled, not given back.
			if key != "" {
				k.setHead(key, d)
			}
			run = append(run, d)
			used++
		}
	}
	k.mu.Unlock()
	if k.s.cfg.AckMode == AckOnReceive {
		for _, d := range keyed {
			if d.claim() {
				k.s.settleErr(d, observer.ScopeAck, d.doAck())
			}
		}
	}
	k.giveBack(nil, back)
	return run, used, waiting
}

// setHead makes d the head of key's line, keeping the line's holds.
// k.mu is held.
func (k *keyLines) setHead(key string, d *record) {
	if l := k.lines[key]; l != nil {
		l.head = d
		return
	}
	k.lines[key] = &keyLine{head: d}
}

// pendingNow counts the deliveries that wait for an in-flight slot.
func (k *keyLines) pendingNow() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.pending)
}

// runPending runs up to n pending deliveries, oldest first, each with an
// in-flight slot the caller took for it, and returns how many it took
// (none after close, which gives them back). Each gives back its unit of
// the waiting set; one whose lease was lost while it waited is given up
// (the backend delivers it again, and its key waits for it, see
// lapseLocked; fenced, the next of its key takes its slot).
func (k *keyLines) runPending(n int) int {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return 0
	}
	n = min(n, len(k.pending))
	ds := slices.Clone(k.pending[:n])
	clear(k.pending[:n])
	k.pending = k.pending[n:]
	run := make([]*record, 0, n)
	var lost []*record
	for _, d := range ds {
		d.state.And(^stateWaiting)
		if !k.s.leaseLost(d) {
			run = append(run, d)
			continue
		}
		lost = append(lost, d)
		if l := k.lines[d.pub.Key]; d.pub.Key != "" && l != nil && l.head == d && !k.s.fencedOut(d) {
			k.lapseLocked(d.pub.Key, l, d)
		}
	}
	k.s.waits.Release(n)
	k.s.disp.push(run)
	k.mu.Unlock()
	for _, d := range lost {
		k.s.giveUp(d)
	}
	return n
}

// line locks k.mu and returns d's key and line when the line's field
// picked by of is d; otherwise it returns a nil line with k.mu released.
func (k *keyLines) line(d *record, of func(*keyLine) *record) (string, *keyLine) {
	key := d.pub.Key
	if key == "" {
		return "", nil
	}
	k.mu.Lock()
	if l := k.lines[key]; l != nil && of(l) == d {
		return key, l
	}
	k.mu.Unlock()
	return "", nil
}

// nextIndex returns the index in l.waiting of the delivery to run next:
// the first of l.holds when it is there, else the first waiting when
// nothing is held; -1 when there is none.
func (l *keyLine) nextIndex() int {
	if len(l.holds) == 0 {
		if len(l.waiting) == 0 {
			return -1
		}
		return 0
	}
	return slices.IndexFunc(l.waiting, func(d *record) bool { return d.pub.ID == l.holds[0] })
}

// take removes and returns l.waiting[i], dropping its hold if it is the
// first.
func (l *keyLine) take(i int) *record {
	d := l.waiting[i]
	if len(l.holds) > 0 && l.holds[0] == d.pub.ID {
		l.holds = l.holds[1:]
	}
	l.waiting = slices.Delete(l.waiting, i, i+1)
	return d
}

func lineHead(l *keyLine) *record { return l.head }
func linePrev(l *keyLine) *record { return l.prev }

// done is called once d is settled and its handler has returned: the
// next delivery of its key, if any, goes to a worker, and takes over d's
// in-flight slot (it gives back its unit of the waiting set). It reports
// whether the slot went on; else the caller frees it. Pushes happen
// under k.mu, so none comes after close (which precedes the dispatcher's
// stop).
func (k *keyLines) done(d *record) bool {
	key, l := k.line(d, lineHead)
	if l == nil {
		// Not a head: no key, given back at close, or retried in its
		// place.
		return false
	}
	i := l.nextIndex()
	if i < 0 && len(l.holds) > 0 && !k.closed {
		// The next of the key is a held delivery that has not come
		// back yet: the key waits for it.
		l.head = nil
		k.mu.Unlock()
		return false
	}
	if i < 0 || k.closed && !k.draining() {
		// After close the rest of the key goes back to the group, in
		// order, after its head (unless draining).
		back := l.waiting
		delete(k.lines, key)
		k.mu.Unlock()
		k.giveBack(d, back)
		return false
	}
	next := l.take(i)
	lost := k.s.leaseLost(next)
	if lost && !k.s.fencedOut(next) {
		// Its lease ran out while it waited: the key waits for it to
		// come back. It keeps its unit of the waiting set until it is
		// given up, and d's slot is freed.
		k.lapseLocked(key, l, next)
		k.mu.Unlock()
		k.s.giveUp(next)
		return false
	}
	l.head = next
	next.state.And(^stateWaiting)
	k.s.waits.Release(1)
	if !lost {
		k.s.disp.push([]*record{next})
		k.mu.Unlock()
		return true
	}
	k.mu.Unlock()
	// Fenced: it goes back to the group at once (see giveUp), or to its
	// lease when d did not go back, which ends its turn, and done runs
	// again for the one after, which the slot goes on to.
	if d.state.Load()&stateNotBack != 0 {
		k.s.lapse(next)
	} else {
		k.s.giveUp(next)
	}
	return true
}

// lapseLocked makes key, whose next delivery d lost its lease while it
// waited (its handler never ran, and the member still holds the group
// lock), wait for d to come back: the backend delivers d again after its
// lease, and the deliveries of the key behind it, here or fetched later,
// must not run before it. d's ID goes to the front of the line's holds,
// so that its redelivery runs as the key's head (see admit); when it is
// already here, behind, it waits for a slot now (runPending). The caller
// gives d up once k.mu is released. When d has not come back within
// lapseWait (its message is gone from the stream, or fetching is paused
// by a full waiting set), the key goes on without it (expireLapse).
// k.mu is held.
func (k *keyLines) lapseLocked(key string, l *keyLine, d *record) {
	id := d.pub.ID
	l.holds = slices.Insert(l.holds, 0, id)
	if end := time.Now().Add(k.s.cfg.AckTimeout); len(l.holds) == 1 || !l.holdEnd.IsZero() {
		l.holdEnd = maxTime(l.holdEnd, end)
	}
	l.head = nil
	k.queueNextLocked(l)
	time.AfterFunc(k.lapseWait(), func() { k.expireLapse(key, id) })
}

// queueNextLocked makes the delivery of l to run next (see nextIndex), if
// it is here, l's head, waiting for an in-flight slot (runPending). It
// reports whether there was one. k.mu is held.
func (k *keyLines) queueNextLocked(l *keyLine) bool {
	i := l.nextIndex()
	if i < 0 {
		return false
	}
	d := l.take(i)
	l.head = d
	k.pending = append(k.pending, d)
	return true
}

// lapseWait bounds how long a key waits for a delivery whose lease was
// lost while it waited: its lease at the broker ends within one ack
// timeout, and a fetch brings it within handoverSettle after that; the
// second ack timeout is slack for a slow broker.
func (k *keyLines) lapseWait() time.Duration {
	return 2*k.s.cfg.AckTimeout + handoverSettle
}

// expireLapse lets key go on without the delivery id it waited for since
// its lease was lost (lapseLocked), if it has not come back by now: the
// deliveries behind it run, and the delivery runs after them if it comes
// back later (the exception in docs/ordering.md).
func (k *keyLines) expireLapse(key, id string) {
	k.mu.Lock()
	l := k.lines[key]
	if k.closed || l == nil || !slices.Contains(l.holds, id) {
		k.mu.Unlock()
		return
	}
	l.holds = slices.DeleteFunc(l.holds, func(h string) bool { return h == id })
	if l.head == nil && !k.queueNextLocked(l) && len(l.holds) == 0 {
		delete(k.lines, key)
	}
	k.mu.Unlock()
	k.s.observe(observer.Event{Scope: observer.ScopeLease, Topic: k.s.cfg.Topic, Group: k.s.cfg.Group, MessageID: id,
		Err: fmt.Errorf("bus: key %q waited %v for its delivery %s, whose lease was lost, to come back; the key goes on without it (it runs when it comes back)", key, k.lapseWait(), id)})
}

// retry replaces the claimed head d by a new delivery of its message with
// Attempt+1 (the same Attempt when not counted: a snooze), run after delay
// in d's place: the key stays held, and the
// new delivery takes over d's in-flight slot. d is finished as nacked. It
// reports false, and does nothing, when d does not hold a key here (no
// key, or given back at close): the caller nacks it through the backend.
// After close, d goes back to the group at once, its key behind it.
func (k *keyLines) retry(d *record, delay time.Duration, counted bool) bool {
	key, l := k.line(d, lineHead)
	if l == nil {
		return false
	}
	if k.closed {
		// Failed while the subscription closes: the message goes back
		// at once (its retry sooner than asked), the rest of its key
		// behind it, as close does for a retry that waits.
		back := l.waiting
		delete(k.lines, key)
		k.mu.Unlock()
		ctx, cancel := k.s.settleCtx()
		defer cancel()
		k.s.backNow(ctx, d, counted)
		k.giveBack(nil, back)
		return true
	}
	r := k.s.successor(d, counted)
	l.head = r
	l.snoozed = !counted
	if d.state.Load()&stateHandlerDone == 0 {
		l.prev = d
		k.prevs.Add(1)
	}
	l.due = time.Now().Add(delay)
	l.retry = time.AfterFunc(delay, func() { k.run(r) })
	k.mu.Unlock()
	// d's slot now belongs to r: d must not give it back.
	d.state.Or(stateReleased)
	d.finish(OutcomeNacked, nil)
	return true
}

// run starts a retry whose delay is over. After close it hands the
// message back to the backend instead.
func (k *keyLines) run(r *record) {
	key, l := k.line(r, lineHead)
	if l == nil {
		return
	}
	l.retry = nil
	if l.prev != nil {
		// The nacked delivery's handler still runs: one at a time.
		l.ready = true
		k.mu.Unlock()
		return
	}
	k.start(key, l, r)
}

// start runs the retry r of line l, or hands it back after close, or
// gives it up when its lease was lost. k.mu is held; start releases it.
func (k *keyLines) start(key string, l *keyLine, r *record) {
	switch {
	case k.closed:
		back := l.waiting
		delete(k.lines, key)
		k.mu.Unlock()
		ctx, cancel := k.s.settleCtx()
		defer cancel()
		k.handBack(ctx, r, back, !l.snoozed)
	case k.s.leaseLost(r):
		if !k.s.fencedOut(r) {
			k.lapseLocked(key, l, r)
		}
		k.mu.Unlock()
		k.s.giveUp(r)
	default:
		k.s.disp.push([]*record{r})
		k.mu.Unlock()
	}
}

// handlerReturned is called when d's handler returns: a retry of d whose
// delay is over and that waited for it starts now.
func (k *keyLines) handlerReturned(d *record) {
	if k.prevs.Load() == 0 {
		return // the common case: no retry waits for a handler
	}
	key, l := k.line(d, linePrev)
	if l == nil {
		return
	}
	l.prev = nil
	k.prevs.Add(-1)
	if !l.ready {
		k.mu.Unlock()
		return
	}
	l.ready = false
	k.start(key, l, l.head)
}

// held appends the deliveries that wait here, behind their head or for
// their retry, for the lease keeper.
func (k *keyLines) held(ds []*record) []*record {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, l := range k.lines {
		if l.retry != nil {
			ds = append(ds, l.head)
		}
		ds = append(ds, l.waiting...)
	}
	return append(ds, k.pending...)
}

// waitingNow counts the deliveries waiting behind their key's head.
func (k *keyLines) waitingNow() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, l := range k.lines {
		n += len(l.waiting)
	}
	return n
}

// Waiting counts the deliveries that wait for their key now (behind a
// head that runs or waits for its retry); 0 without key ordering.
func (s *consumer) Waiting() int {
	if s.keys == nil {
		return 0
	}
	return s.keys.waitingNow()
}

// close starts the shutdown of the key lines. A head waiting for its
// retry goes back to the group at once (its retry comes sooner than its
// delay asked, as the next member's first delivery of the key), and the
// deliveries behind it go back after it without counting an attempt. A
// pending delivery goes back the same way, uncounted, the deliveries of
// its key after it. A running head finishes as the shutdown lets it; then
// the deliveries behind it go back the same way (done).
func (k *keyLines) close(ctx context.Context) {
	type line struct {
		head    *record
		back    []*record
		counted bool
	}
	var retries []line
	var back []*record
	k.mu.Lock()
	k.closed = true
	for _, l := range k.lines {
		k.heldAtClose = k.heldAtClose || len(l.holds) > 0
	}
	for key, l := range k.lines {
		if l.retry != nil && l.retry.Stop() {
			retries = append(retries, line{l.head, l.waiting, !l.snoozed})
			delete(k.lines, key)
			if l.prev != nil {
				k.prevs.Add(-1)
			}
		}
	}
	for _, d := range k.pending {
		back = append(back, d)
		if l := k.lines[d.pub.Key]; d.pub.Key != "" && l != nil && l.head == d {
			back = append(back, l.waiting...)
			delete(k.lines, d.pub.Key)
		}
	}
	k.pending = nil
	for key, l := range k.lines {
		if l.head == nil {
			// Waiting for a held delivery: the rest of the key goes
			// back to the group.
			back = append(back, l.waiting...)
			delete(k.lines, key)
		}
	}
	k.mu.Unlock()
	for _, l := range retries {
		k.handBack(ctx, l.head, l.back, l.counted)
	}
	k.giveBack(nil, back)
}

// handBack gives a retry that did not run back to the group, counted as
// the failure it follows (a nack) unless it is a snooze, then the
// deliveries behind it, not counted (a release); both are redelivered at
// once, the retry first.
func (k *keyLines) handBack(ctx context.Context, retry *record, back []*record, counted bool) {
	if retry.claim() {
		k.s.backNow(ctx, retry, counted)
	}
	k.s.handlerNeverRan(retry)
	k.giveBack(retry, back)
}

// backNow gives a claimed delivery back to the group at once: a nack when
// counted, else a release.
func (s *consumer) backNow(ctx context.Context, d *record, counted bool) {
	if counted {
		err := d.doNack(ctx, 0)
		if err != nil && !errors.Is(err, backend.ErrStale) {
			s.notGivenBack(d)
		}
		s.settleErr(d, observer.ScopeNack, err)
		return
	}
	s.release(ctx, d)
}

// giveBack hands deliveries that never reached their handler back to the
// group without counting an attempt, and frees their slots (or units of
// the waiting set). A delivery that could not be given back (see
// stateNotBack), or head when it is one, leaves the deliveries of its key
// after it in ds to their leases, so that none returns to the group
// before it. head is the delivery ds follow in their key, or nil.
func (k *keyLines) giveBack(head *record, ds []*record) {
	if len(ds) == 0 {
		return
	}
	ctx, cancel := k.s.settleCtx()
	defer cancel()
	var stuck map[string]bool // allocated only when a give-back fails
	if head != nil && head.state.Load()&stateNotBack != 0 {
		stuck = map[string]bool{head.pub.Key: true}
	}
	for _, d := range ds {
		key := d.pub.Key
		if key != "" && stuck[key] {
			k.s.lapse(d)
			continue
		}
		if d.claim() {
			k.s.release(ctx, d)
		}
		if key != "" && d.state.Load()&stateNotBack != 0 {
			if stuck == nil {
				stuck = map[string]bool{}
			}
			stuck[key] = true
		}
		k.s.handlerNeverRan(d)
	}
}

// lapse leaves a delivery that never reached its handler to its lease:
// the backend delivers it again once the lease ends.
func (s *consumer) lapse(d *record) {
	s.notGivenBack(d)
	if d.claim() {
		d.finish(OutcomeLeaseLost, nil)
	}
	s.handlerNeverRan(d)
}

// successor is a new delivery of d's message with Attempt+1 (the same
// Attempt when not counted), holding d's lease: same AckID, same lease
// start and renewals.
func (s *consumer) successor(d *record, counted bool) *record {
	r := &record{sub: s, ackID: d.ackID, received: d.received, attempt: d.attempt}
	if counted {
		r.attempt++
	}
	r.pub = d.pub
	r.pub.Attempt = int(r.attempt)
	r.pub.rec = r
	s.mu.Lock()
	if x := d.ext.Load(); x != nil {
		r.extLocked().kept.renewed = x.kept.renewed
	}
	s.mu.Unlock()
	return r
}

// leaseLost reports whether the lease keeper gave up d's lease while d
// waited.
func (s *consumer) leaseLost(d *record) bool {
	if d.ext.Load() == nil {
		return false
	}
	return s.keptLost(d)
}

// keptLost is leaseLost for a delivery whose ext is set.
func (s *consumer) keptLost(d *record) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return d.ext.Load().kept.lost
}

// giveUp settles a held delivery whose lease was lost as expired; the
// backend delivers it again. One given up because the group lock passed
// on (fenced) goes back to the group at once, uncounted, after the
// deliveries of its key before it.
func (s *consumer) giveUp(d *record) {
	if d.claim() {
		if s.fencedOut(d) {
			s.releaseNow(d)
		} else {
			d.finish(OutcomeLeaseLost, nil)
		}
	}
	s.handlerNeverRan(d)
}

// handlerNeverRan marks the handler of a delivery that never reached it
// as done, freeing its slot (or unit of the waiting set) once it is
// settled.
func (s *consumer) handlerNeverRan(d *record) {
	(*handlerCtx)(d).end()
	if d.handlerDone() {
		s.free(d)
	}
}

// hold holds back the keys of ps, deliveries the group handed out before
// this member took the group lock over and has not settled, in log
// order: each key's held deliveries run first, in that order, as they
// come back, and the deliveries of the key fetched meanwhile wait behind
// them. It returns how many keys it holds.
func (k *keyLines) hold(ps []backend.Pending) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, p := range ps {
		if p.Key == "" {
			continue
		}
		l := k.lines[p.Key]
		if l == nil {
			l = &keyLine{}
			k.lines[p.Key] = l
		}
		if len(l.holds) == 0 {
			n++
		}
		l.holds = append(l.holds, p.ID)
		if p.LeaseEnd.IsZero() || l.holdEnd.IsZero() && len(l.holds) > 1 {
			l.holdEnd = time.Time{}
		} else {
			l.holdEnd = maxTime(l.holdEnd, p.LeaseEnd)
		}
	}
	return n
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// holdsDue reports whether a key waits for a held delivery whose lease
// has ended by now (or whose end is unknown): one the group may have
// settled meanwhile (its member acked it just before it died), which only
// the group's list of pending deliveries tells (see recheck).
func (k *keyLines) holdsDue(now time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, l := range k.lines {
		if l.head == nil && len(l.holds) > 0 && !now.Before(l.holdEnd) {
			return true
		}
	}
	return false
}

// recheck drops the holds whose deliveries the group no longer lists as
// pending (ps, complete): they were settled. A key that waited for one
// runs its next delivery (it waits for an in-flight slot, see
// runPending); a key left with nothing is free. When full is set (the
// waiting set is full, so that nothing more is fetched) the deliveries
// waiting behind a held delivery that is due go back to the group,
// uncounted, so that the fetch that brings it back can run; they are
// held in their order behind it (the backend may hand them out again in
// another).
func (k *keyLines) recheck(ps []backend.Pending, now time.Time, full bool) {
	ids := make(map[string]struct{}, len(ps))
	for _, p := range ps {
		ids[p.ID] = struct{}{}
	}
	var back []*record
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	for key, l := range k.lines {
		if len(l.holds) == 0 {
			continue
		}
		l.holds = slices.DeleteFunc(l.holds, func(id string) bool { _, ok := ids[id]; return !ok })
		if l.head != nil {
			continue
		}
		if k.queueNextLocked(l) {
			continue
		}
		if len(l.holds) == 0 {
			delete(k.lines, key)
			continue
		}
		if full && !now.Before(l.holdEnd) {
			// They come back after the held delivery, but not
			// necessarily in their order: each is held in turn.
			for _, d := range l.waiting {
				if !slices.Contains(l.holds, d.pub.ID) {
					l.holds = append(l.holds, d.pub.ID)
				}
			}
			back = append(back, l.waiting...)
			l.waiting = nil
		}
	}
	k.mu.Unlock()
	k.giveBack(nil, back)
}

// dropHolds forgets every hold, when the member loses the group lock: a
// key that waited for a held delivery gives what waits behind it up (it
// goes back to the group, see giveUp); the next holder holds what is
// pending then.
func (k *keyLines) dropHolds() {
	var up []*record
	k.mu.Lock()
	for key, l := range k.lines {
		l.holds = nil
		if l.head == nil {
			up = append(up, l.waiting...)
			delete(k.lines, key)
		}
	}
	k.mu.Unlock()
	for _, d := range up {
		k.s.giveUp(d)
	}
}

// leftHeld reports whether a key still waited for a held delivery when
// the member closed (see heldAtClose).
func (k *keyLines) leftHeld() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.heldAtClose
}

// idle reports whether no delivery is here: none held by its key, none
// waiting for a slot.
func (k *keyLines) idle() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.lines) == 0 && len(k.pending) == 0
}

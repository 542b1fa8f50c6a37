package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cenkalti/backoff/v4"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/autoscale"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/internal/slots"
	"github.com/eventbus-go/bus/observer"
)

// consumer is one running subscription to one stored topic (a
// partition's, for a partitioned topic): its fetch loop, its workers, its
// acker and lease keeper, and its shutdown. It is safe for concurrent use.
type consumer struct {
	cfg  consumerConfig
	bus  *Bus
	bsub backend.Subscription
	// sub is the public subscription of an unpartitioned topic, which the
	// consumer's end removes from the bus; nil for a partition, whose
	// manager does.
	sub *Subscription

	slots *slots.Pool // max in flight: handlers running at once
	// waits is the room of the waiting set (consumerConfig.MaxWaiting):
	// the deliveries that wait for their key hold a unit of it instead
	// of an in-flight slot. nil without key ordering.
	waits *slots.Pool
	acks  *acker
	disp  *dispatcher

	fetchCtx      context.Context // ends when fetching must stop
	stopFetch     context.CancelFunc
	handlerCtx    context.Context // parent of every handler ctx
	cancelHandler context.CancelCauseFunc
	// force ends when the ctx of any Close ends, whichever Close started
	// the shutdown: the shutdown then stops waiting for handlers.
	force     context.Context
	forceStop context.CancelCauseFunc
	stopAfter func() bool

	fetchDone chan struct{}
	unsettled sync.WaitGroup      // delivered but not yet released
	keeper    *leaseKeeper        // nil when no handler runs under a lease
	keys      *keyLines           // nil without key ordering
	owner     *groupLock          // nil without a group lock
	holds     *keyHolds           // the held keys; nil without KeyHold
	bcast     *broadcastLease     // a broadcast subscription's; nil otherwise
	results   backend.ResultStore // where results go (Delivery.SetResult); nil: the backend keeps none
	workers   sync.WaitGroup      // the fetch, ack, keeper and group lock goroutines

	// mu guards the extension state of the deliveries (their deliveryExt),
	// the manual heap and the lease keeper's records; see the package doc.
	mu     sync.Mutex
	manual manualLeases // AckManual deliveries waiting for settlement

	// outlived is set once a shutdown gave up on handlers still running
	// (a forced Close): the settlements that fail after it are counted in
	// lateDropped and reported once, when the last of them returned
	// (reportLate), since Close's error said they would be dropped.
	outlived atomic.Bool
	// notBack is set once a delivery could not be given back (see
	// stateNotBack): the close is not clean.
	notBack     atomic.Bool
	lateDropped atomic.Int64

	closeMu      sync.Mutex // guards the fields below
	closeStarted bool
	waiting      bool  // a Close other than the first is waiting
	shutdownDone bool  // closeErr is set
	errTaken     bool  // closeErr went to a caller or the observer
	closeErr     error // what the shutdown returned
	err          error // why the subscription ended, if not by Close
	done         chan struct{}

	// extraWant is how many deliveries a key-ordered fetch asks for
	// beyond its free in-flight slots, holding a unit of the waiting set
	// alone (see take); batchWaiting counts those of the last batch that
	// wait for their key. The fetch loop's own.
	extraWant, batchWaiting int

	// dispatchBuf holds the runs of records of the batch being
	// dispatched; the fetch loop reuses it.
	dispatchBuf [][]record
	// slab is how many records dispatch allocates at once (slabLen).
	slab int
}

// consumerConfig is what a consumer runs with: data, built from the
// options by Bus.consumerConfig, every field set (defaults applied).
type consumerConfig struct {
	// Topic is the stored topic (a partition's); PubTopic the one the
	// user subscribed to, which the Deliveries name.
	Topic, PubTopic, Group string
	AckMode                AckMode
	MaxInFlight            int
	Limiter                Limiter // shared limiter, or nil
	// Feedback are told each handler's latency and error: a limiter
	// that has a Feedback method, and the autoscale controller.
	Feedback       []feedbacker
	AckTimeout     time.Duration
	MaxExtension   time.Duration
	HandlerTimeout time.Duration // 0: none
	MaxDeliveries  int
	DeadLetter     string // "": dead-lettering off
	NewBackOff     func() backoff.BackOff
	MaxPayload     int
	AckBatch       int
	AckInterval    time.Duration
	Caps           backend.Capabilities
	Observer       observer.Observer
	Logger         *slog.Logger
	// Handler runs a delivery: the user's, inside its middleware.
	Handler Handler
	// Decoder, when set, decodes each delivery before Handler runs (a
	// typed subscription's; see decoder).
	Decoder decoder
	// KeyOrdering sequences the deliveries of each key (see keyLines);
	// MaxWaiting bounds those that wait for their key: they hold no
	// in-flight slot, and fetching pauses only while this many wait.
	KeyOrdering bool
	MaxWaiting  int
	// KeyHold holds a key whose head was dead-lettered (WithKeyFailure);
	// it comes with KeyOrdering and Locker.
	KeyHold bool
	// Locker, when set, is the group lock the consumer must hold to fetch
	// (see groupLock), taken as LockHolder, unique to the subscription.
	Locker     backend.GroupLocker
	LockHolder string
	// Broadcast, when set, is the lease on a broadcast subscription's
	// own group (see broadcastLease): renewed while the consumer runs,
	// and the group deleted when it closes.
	Broadcast *broadcastLease
	// ResultTTL is how long the handlers' results are kept.
	ResultTTL time.Duration
	// Event, when set, receives a lifecycle event at each step of a
	// delivery, and never blocks; nil turns events off.
	Event *lifecycle.Sink
	// Autoscale, when set, is the controller the consumer stops when it
	// ends (an unpartitioned subscription's; a partitioned one's manager
	// stops its own).
	Autoscale *autoscale.Controller
	// Health records how the Receives and group lock rounds go: the
	// subscription's, shared by the partitions it owns; nil: not
	// recorded.
	Health *health
}

// feedbacker is told each handler's latency and error (an adaptive
// limiter, the autoscale controller).
type feedbacker interface {
	Feedback(latency time.Duration, err error)
}

// newConsumer returns the consumer of cfg over bsub for b, not yet
// running; sub is the public subscription when the topic is not
// partitioned. Fetching stops as soon as ctx ends; handlers keep their own
// ctx, which the shutdown cancels only when its ctx runs out.
func newConsumer(ctx context.Context, b *Bus, sub *Subscription, cfg consumerConfig, bsub backend.Subscription) *consumer {
	s := &consumer{cfg: cfg, bus: b, sub: sub, bsub: bsub, slots: slots.New(cfg.MaxInFlight), slab: slabLen(unsafe.Sizeof(record{})),
		fetchDone: make(chan struct{}), done: make(chan struct{})}
	s.manual.s = s
	// No more acks wait for a flush than the subscription has slots: a
	// broker that pushes at most that many unacked messages (a prefetch,
	// a max ack pending) sends nothing more until they are flushed, and
	// would otherwise wait out the flush interval each time.
	ackBatch := cfg.AckBatch
	if cfg.MaxInFlight > 0 {
		ackBatch = min(ackBatch, cfg.MaxInFlight)
	}
	s.acks = newAcker(bsub, cfg.Observer, cfg.Topic, cfg.Group, ackBatch, cfg.AckInterval)
	s.disp = newDispatcher(s, cfg.MaxInFlight, s.acks)
	s.fetchCtx, s.stopFetch = context.WithCancel(ctx)
	s.handlerCtx, s.cancelHandler = context.WithCancelCause(context.WithoutCancel(ctx))
	s.force, s.forceStop = context.WithCancelCause(context.Background())
	s.keeper = newLeaseKeeper(s)
	if cfg.KeyOrdering {
		s.keys = newKeyLines(s)
		s.waits = slots.New(max(cfg.MaxWaiting, 1))
	}
	if cfg.KeyHold {
		s.holds = &keyHolds{heads: map[string]keyHold{}}
	}
	if cfg.Locker != nil {
		s.owner = newGroupLock(s, cfg.Locker)
	}
	if cfg.Broadcast != nil {
		s.bcast = cfg.Broadcast
		s.bcast.s = s
	}
	if rs, ok := b.be.(backend.ResultStore); ok && cfg.Caps.Results {
		s.results = rs
	}
	s.stopAfter = context.AfterFunc(ctx, s.goCloseInBackground)
	return s
}

// Start runs the consumer's goroutines, and the autoscale controller of
// an unpartitioned subscription.
func (s *consumer) Start() {
	if s.sub != nil && s.cfg.Autoscale != nil {
		s.cfg.Autoscale.Start()
	}
	s.workers.Add(2)
	go func() { defer s.workers.Done(); s.acks.run() }()
	go func() { defer s.workers.Done(); s.fetch() }()
	if s.keeper != nil {
		s.workers.Add(1)
		go func() { defer s.workers.Done(); s.keeper.run() }()
	}
	if s.owner != nil {
		s.workers.Add(1)
		go func() { defer s.workers.Done(); s.owner.run() }()
	}
	if s.bcast != nil {
		s.workers.Add(1)
		go func() { defer s.workers.Done(); s.bcast.run() }()
	}
}

// Discard gives up a consumer that newConsumer made and that never
// started, and closes its backend subscription.
func (s *consumer) Discard() {
	s.stopAfter()
	s.stopFetch()
	s.cancelHandler(ErrClosed)
	s.forceStop(ErrClosed)
	close(s.fetchDone)
	_ = s.bsub.Close()
	if s.bcast != nil {
		s.bcast.discard()
	}
}

// Done is closed when the subscription has fully stopped.
func (s *consumer) Done() <-chan struct{} { return s.done }

// Err returns the error that ended the subscription: nil while it runs and
// after a clean Close, otherwise why it stopped.
func (s *consumer) Err() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	return s.err
}

func (s *consumer) observe(e observer.Event) { s.cfg.Observer.Observe(context.Background(), e) }

// event is an event about d.
func (s *consumer) event(d *record, scope observer.Scope, err error) observer.Event {
	return observer.Event{Scope: scope, Topic: s.cfg.Topic, Group: s.cfg.Group, MessageID: d.pub.ID, Attempt: int(d.attempt), Err: err}
}

// lifecycleEvent is the lifecycle event of kind about d at mono (a
// monoNow reading, which the emitter turns into its time), to be
// completed and passed to cfg.Event (which the caller has checked is
// set). mono is read before the step the event records reaches the
// backend (the nack, the snooze, the move to the dead-letter topic), so
// that what others do once they see it (a redelivery, a replay) is
// stamped later.
func (s *consumer) lifecycleEvent(d *record, kind lifecycle.Kind, mono int64) lifecycle.Event {
	return lifecycle.Event{Kind: kind, Mono: mono, MessageID: d.pub.ID, Key: d.pub.Key, Topic: s.cfg.Topic, Group: s.cfg.Group, Attempt: int(d.attempt)}
}

// emitDelay emits a lifecycle event of kind about d with a delay, when
// events are on.
func (s *consumer) emitDelay(d *record, kind lifecycle.Kind, delay time.Duration) {
	if s.cfg.Event != nil {
		e := s.lifecycleEvent(d, kind, monoNow())
		e.Delay = delay
		s.cfg.Event.Emit(&e)
	}
}

// emitDeadLetter emits the dead_lettered event of d (moved to topic, or
// dropped when topic is empty) at mono, preceded by an expired event when
// it expired. mono is read before the move, so that the event is older
// than anything done to the dead letter once it is visible (a replay).
func (s *consumer) emitDeadLetter(d *record, code backend.DeadLetterCode, topic string, reason error, mono int64) {
	e := s.lifecycleEvent(d, lifecycle.Expired, mono)
	e.Code, e.Error = string(code), lifecycle.CutError(reason.Error())
	if code == backend.CodeExpired {
		s.cfg.Event.Emit(&e)
	}
	e.Kind, e.DeadLetter = lifecycle.DeadLettered, topic
	s.cfg.Event.Emit(&e)
}

func (s *consumer) report(d *record, scope observer.Scope, err error) {
	if s.outlived.Load() && lateSettlement(scope) {
		s.lateDropped.Add(1)
		return
	}
	s.observe(s.event(d, scope, err))
}

// lateSettlement reports whether a failure of scope is one of a
// settlement (ack, nack or release, dead-lettering).
func lateSettlement(scope observer.Scope) bool {
	return scope == observer.ScopeAck || scope == observer.ScopeNack || scope == observer.ScopeDeadLetter
}

// reportLate reports, once, the settlements that failed after a forced
// shutdown (see consumer.outlived): one ScopeLease event with their count,
// since their messages come back after their lease.
func (s *consumer) reportLate() {
	if n := s.lateDropped.Load(); n > 0 {
		s.observe(observer.Event{Scope: observer.ScopeLease, Topic: s.cfg.PubTopic, Group: s.cfg.Group,
			Err: fmt.Errorf("bus: %d late settlement(s) of handlers that outlived Close were dropped; their messages are redelivered after the lease", n)})
	}
}

// reportDeadLetter tells the observer that d was dead-lettered or dropped,
// and why: one event per message, with its code.
func (s *consumer) reportDeadLetter(d *record, code backend.DeadLetterCode, reason error) {
	e := s.event(d, observer.ScopeDeadLetter, reason)
	e.Code = string(code)
	s.observe(e)
}

// Receive retry backoff: full jitter between 0 and an exponential cap.
const (
	receiveBackoffBase = 10 * time.Millisecond
	receiveBackoffMax  = 5 * time.Second
)

// fetch is the receive loop: take capacity, ask the backend for at most
// that many messages, start a handler per message. With a
// backend.PartialReceiver it keeps the capacity of the messages still
// coming (held), and the next Receive collects them with what else is
// free (takeMore).
func (s *consumer) fetch() {
	defer close(s.fetchDone)
	var f fetchState
	partial, _ := s.bsub.(backend.PartialReceiver)
	// sharedWant bounds what is taken from a shared limiter: an idle
	// subscription blocked in Receive holds a single unit, so it does not
	// starve the others; the amount doubles while messages flow.
	sharedWant := 1
	// held is the capacity kept for the messages coming (heldSlots of
	// it with an in-flight slot), and pulled what the Receives since the
	// last that left nothing coming returned.
	held, heldSlots, pulled := 0, 0, 0
	rctx := s.fetchCtx
	for {
		if held > 0 && rctx.Err() != nil {
			// Fetching stops, or the group lock was lost, while messages
			// are coming: see endComing.
			s.endComing(rctx, held, heldSlots)
			held, heldSlots = 0, 0
		}
		if s.keys != nil && !s.runPending(held == 0) {
			return
		}
		n, slots := held, heldSlots
		if held > 0 {
			more := s.takeMore(held)
			n, slots = n+more, slots+more
		} else {
			rctx = s.fetchCtx
			if s.owner != nil {
				var ok bool
				if rctx, ok = s.owner.wait(s.fetchCtx); !ok {
					return
				}
			}
			var ok bool
			if n, slots, ok = s.take(sharedWant); !ok {
				return
			}
		}
		var got int
		var err error
		held, heldSlots, got, err = s.receive(rctx, n, slots, partial)
		if pulled += got; held == 0 {
			sharedWant = max(1, min(2*pulled, s.cfg.MaxInFlight))
			pulled = 0
		}
		if s.waits != nil && s.cfg.Limiter == nil && got > 0 {
			// A batch whose deliveries wait for their key (behind a busy
			// or retrying head) makes the next fetch ask for twice as
			// many beyond its free slots: a backlog of blocked keys is
			// passed in a few fetches, not one per free slot.
			s.extraWant = min(2*s.batchWaiting, s.cfg.MaxWaiting)
		}
		if !s.afterReceive(&f, err) {
			if held > 0 {
				s.endComing(rctx, held, heldSlots)
			}
			return
		}
	}
}

// runPending runs the deliveries fetched beyond the free in-flight slots
// (see keyLines.admit) as slots free up, oldest first, before anything
// more is fetched: with wait set it waits for slots until none is left
// pending, else it takes only the free ones. It reports false when
// fetching must stop.
func (s *consumer) runPending(wait bool) bool {
	for {
		n := s.keys.pendingNow()
		if n == 0 {
			return true
		}
		var got int
		if wait {
			var err error
			if got, err = s.acquire(n); err != nil {
				return false
			}
		} else if got = s.slots.TryAcquire(1, n); got == 0 {
			return true
		}
		if unused := got - s.keys.runPending(got); unused > 0 {
			s.slots.Release(unused)
		}
	}
}

// endComing ends what is coming (held, with its capacity) when fetching
// stops or the group lock is lost: a last Receive, with an ended ctx,
// returns it (the bus handles it as it handles the messages of any Receive
// cut short) or leaves it to its lease, and the capacity it does not use
// is given back.
func (s *consumer) endComing(rctx context.Context, held, heldSlots int) {
	ctx, cancel := context.WithCancel(rctx)
	cancel()
	_, _, _, _ = s.receive(ctx, held, heldSlots, nil)
}

// receive runs one Receive with the capacity of n messages, slots of
// them with an in-flight slot (with key ordering each has a unit of the
// waiting set, see take), dispatches what it returns (got) and gives back
// the capacity it did not use but for what is still coming (held, with
// heldSlots of the slots left), which partial, when not nil, reports. A
// Receive whose ctx has ended leaves nothing held.
func (s *consumer) receive(rctx context.Context, n, slots int, partial backend.PartialReceiver) (held, heldSlots, got int, err error) {
	msgs, err := s.bsub.Receive(rctx, n)
	if len(msgs) > n {
		msgs = s.returnExcess(msgs, n)
	}
	if partial != nil && rctx.Err() == nil {
		held = min(partial.Coming(), n-len(msgs))
	}
	if s.owner != nil && rctx.Err() != nil && s.fetchCtx.Err() == nil {
		// The group lock was lost during the Receive (see owner): what
		// it was handed lapses back to the group, after what this
		// member held, which it gives back now.
		msgs, err = nil, nil
	}
	used := 0
	if len(msgs) > 0 {
		used = s.dispatch(msgs, slots)
	}
	free := slots - used
	heldSlots = min(free, held)
	s.releaseRunning(free - heldSlots)
	s.releaseWaits(n - len(msgs) - held)
	return held, heldSlots, len(msgs), err
}

// takeMore takes, without waiting, the free in-flight slots beyond the
// held ones kept for messages coming, when at least a quarter of
// MaxInFlight is free: the backend may ask for them before what is
// coming has arrived. A subscription with a shared limiter or a waiting
// set takes none (their capacity is taken by take alone).
func (s *consumer) takeMore(held int) int {
	if s.cfg.Limiter != nil || s.waits != nil {
		return 0
	}
	return s.slots.TryAcquire(s.cfg.MaxInFlight/4, s.cfg.MaxInFlight-held)
}

// fetchState is what the fetch loop knows of failing Receives.
type fetchState struct {
	failures int
	outage   observer.Outage
}

// take takes the capacity of the next Receive, n messages: in-flight
// slots, then units of the shared limiter, and with key ordering as many
// units of the waiting set, since each delivery fetched may run or wait
// for its key (dispatch gives back the kind it does not use). With key
// ordering and no shared limiter it also takes up to extraWant units of
// the waiting set alone, for deliveries beyond the slots: those that
// wait for their key need no slot, and those that could run wait for
// one (keyLines.pending). It returns n and how many of them have a
// slot, and reports false when fetching must stop.
func (s *consumer) take(sharedWant int) (n, slots int, ok bool) {
	units := s.cfg.MaxInFlight
	if s.waits != nil {
		// Only a full waiting set pauses fetching.
		w, err := s.waits.Acquire(s.fetchCtx, 1, units+s.extraWant, nil)
		if err != nil {
			return 0, 0, false
		}
		units = w
	}
	slots, err := s.acquire(min(units, s.cfg.MaxInFlight))
	if err != nil {
		s.releaseWaits(units)
		return 0, 0, false
	}
	if s.cfg.Limiter != nil {
		m, err := s.cfg.Limiter.Acquire(s.fetchCtx, min(slots, sharedWant))
		if err != nil {
			s.slots.Release(slots)
			s.releaseWaits(units)
			return 0, 0, false
		}
		if m < slots {
			s.slots.Release(slots - m)
			slots = m
		}
	}
	extra := 0
	if s.waits != nil && s.cfg.Limiter == nil {
		extra = min(units-slots, s.extraWant)
	}
	s.releaseWaits(units - slots - extra)
	if s.fetchCtx.Err() != nil {
		// Cancelled while waiting for capacity: no Receive starts.
		s.releaseSlots(slots)
		s.releaseWaits(extra)
		return 0, 0, false
	}
	return slots + extra, slots, true
}

// releaseWaits gives back n units of the waiting set, if there is one.
func (s *consumer) releaseWaits(n int) {
	if s.waits != nil {
		s.waits.Release(n)
	}
}

// afterReceive handles the error of a Receive: it backs off after a
// failure that a retry may fix, and ends the subscription after one that
// none fixes. It reports false when fetching must stop.
func (s *consumer) afterReceive(f *fetchState, err error) bool {
	base := observer.Event{Scope: observer.ScopeReceive, Topic: s.cfg.Topic, Group: s.cfg.Group}
	if err == nil {
		s.cfg.Health.received(nil)
		if f.failures > 0 {
			f.failures = 0
			f.outage.Recover(context.Background(), s.cfg.Observer, base)
		}
		return true
	}
	if s.fetchCtx.Err() != nil {
		return false
	}
	s.cfg.Health.received(err)
	if errors.Is(err, ErrClosed) || backend.IsPermanent(err) {
		// No retry fixes it: end the subscription, say why once.
		base.Err = fmt.Errorf("bus: receive %q: %w", s.cfg.Topic, err)
		s.observe(base)
		s.fail(base.Err)
		return false
	}
	f.failures++
	f.outage.Fail(context.Background(), s.cfg.Observer, base, err)
	ceiling := min(receiveBackoffBase<<min(f.failures, 20), receiveBackoffMax)
	return s.sleep(rand.N(ceiling) + time.Millisecond)
}

// releaseSlots gives back n slots taken for a Receive that did not fill
// them, with their units of the waiting set.
func (s *consumer) releaseSlots(n int) {
	s.releaseRunning(n)
	s.releaseWaits(n)
}

// releaseRunning gives back n in-flight slots and their units of the
// shared limiter.
func (s *consumer) releaseRunning(n int) {
	if n <= 0 {
		return
	}
	s.slots.Release(n)
	if s.cfg.Limiter != nil {
		s.cfg.Limiter.Release(n)
	}
}

// fetchLinger is how long a saturated subscription waits for a quarter of
// its capacity to free up before it fetches for fewer slots.
const fetchLinger = 2 * time.Millisecond

// acquire takes free in-flight slots for the next Receive, at most most.
// When every slot is busy it waits for a quarter of them (briefly), so
// that a saturated subscription fetches in batches rather than one
// message per freed slot.
func (s *consumer) acquire(most int) (int, error) {
	need := s.cfg.MaxInFlight / 4
	if n := s.slots.TryAcquire(need, most); n > 0 {
		return n, nil
	}
	t := time.NewTimer(fetchLinger)
	defer t.Stop()
	return s.slots.Acquire(s.fetchCtx, need, most, t.C)
}

// returnExcess handles a backend that broke the contract by returning more
// than it was asked for: the extra messages are handed back at once, never
// run without capacity, and the breach is reported.
func (s *consumer) returnExcess(msgs []*backend.Message, n int) []*backend.Message {
	extra := msgs[n:]
	s.observe(observer.Event{Scope: observer.ScopeReceive, Topic: s.cfg.Topic, Group: s.cfg.Group,
		Err: fmt.Errorf("backend returned %d messages for a Receive of at most %d; handed %d back", len(msgs), n, len(extra))})
	for _, m := range extra {
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		if err := s.bsub.Nack(ctx, m.AckID, 0); err != nil {
			s.observe(observer.Event{Scope: observer.ScopeNack, Topic: s.cfg.Topic, Group: s.cfg.Group, MessageID: m.ID, Attempt: m.Attempt, Err: err})
		}
		cancel()
	}
	return msgs[:n]
}

// dispatch turns a batch into deliveries and queues them for the workers,
// and returns how many of the in-flight slots of the batch (slots) they
// took.
// The records of a batch share allocations of up to s.slab of them
// (see slabLen), which the workers take as runs. They are never reused:
// user code may keep a delivery as long as it likes (to settle it later
// in AckManual, or to read its fields).
func (s *consumer) dispatch(msgs []*backend.Message, slots int) int {
	runs := s.dispatchBuf[:0]
	received := monoNow()
	for i := 0; i < len(msgs); {
		run := make([]record, min(len(msgs)-i, s.slab))
		for j := range run {
			d, m := &run[j], msgs[i+j]
			d.sub = s
			d.ackID = m.AckID
			d.received = received
			d.attempt = int32(max(m.Attempt, 1))
			if len(m.Payload) > s.cfg.MaxPayload {
				d.state.Store(stateOversized)
			}
			s.fill(d, m)
		}
		runs = append(runs, run)
		i += len(run)
	}
	s.unsettled.Add(len(msgs))
	used := len(msgs)
	if s.keys == nil {
		s.disp.pushRuns(runs, len(msgs))
	} else {
		used = s.dispatchKeyed(runs, len(msgs), slots)
	}
	clear(runs)
	s.dispatchBuf = runs[:0]
	return used
}

// dispatchKeyed queues the n deliveries of runs that do not wait, and
// returns how many of the batch's slots they took. Each came with a unit
// of the waiting set, and up to slots of them with an in-flight slot:
// those that run give back the unit; those that wait for their key, or
// for a slot (pending), keep it, and the caller gives back the slots left.
func (s *consumer) dispatchKeyed(runs [][]record, n, slots int) int {
	ds := make([]*record, 0, n)
	for _, run := range runs {
		for i := range run {
			ds = append(ds, &run[i])
		}
	}
	run, used, waiting := s.keys.admit(ds, slots)
	s.batchWaiting = waiting
	s.releaseWaits(used)
	s.disp.push(run)
	return used
}

// fill sets the public face of d, a record just allocated (zeroed), from
// m, and makes it lead back to d. Only what is set is written, field by
// field, as each pointer written while the collector marks costs a write
// barrier.
func (s *consumer) fill(d *record, m *backend.Message) {
	p := &d.pub
	p.ID = m.ID
	if m.Key != "" {
		p.Key = m.Key
	}
	if len(m.Headers) > 0 {
		p.Headers, p.DeliverAt, p.ExpiresAt = takeTimes(m.Headers)
	} else if m.Headers != nil {
		p.Headers = m.Headers
	}
	p.Payload = m.Payload
	p.Topic = s.cfg.PubTopic
	p.Group = s.cfg.Group
	p.Attempt = int(d.attempt)
	p.PublishedAt = m.PublishedAt
	p.rec = d
}

// deliverySlabBytes is the most bytes of records allocated at once: a
// size class of the allocator (small objects, cheap to allocate and to
// free, end at 32 KiB) whose spans hold several objects (four of 18 KiB
// to a span of 72 KiB), so that most slabs come from a span the
// allocator holds already; in a class of one object to a span (16 KiB,
// 32 KiB), every slab takes a span of its own from the heap, and every
// slab freed gives one back.
const deliverySlabBytes = 18 << 10

// mallocHeader is what the allocator puts before an object with pointers
// of more than 512 bytes, within its size class.
const mallocHeader = 8

// slabLen is how many records of size bytes fill deliverySlabBytes with
// the allocator's header, so that the block fits the size class and no
// part of it is left unused.
func slabLen(size uintptr) int { return max(1, int((deliverySlabBytes-mallocHeader)/size)) }

// free frees what the finished delivery d held: its unit of the waiting
// set when it never left it, else its in-flight slot.
func (s *consumer) free(d *record) {
	if d.state.Load()&stateWaiting != 0 {
		s.waits.Release(1)
		s.unsettled.Add(-1)
		return
	}
	s.releaseDone(1)
}

// releaseDone frees the in-flight slots of n finished deliveries.
func (s *consumer) releaseDone(n int) {
	s.slots.Release(n)
	if s.cfg.Limiter != nil {
		s.cfg.Limiter.Release(n)
	}
	s.unsettled.Add(-n)
}

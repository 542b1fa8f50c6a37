package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// Subscription is a running handler on a topic and group. It is safe for
// concurrent use. It ends when Close is called, when the ctx given to
// Subscribe ends, when the bus closes, or when the backend fails for good
// (see Err).
type Subscription struct {
	bus     *Bus
	topic   string
	opts    subscribeOptions
	caps    backend.Capabilities
	bsub    backend.Subscription
	handler Handler

	sem      *ConcurrencyLimiter // max in flight
	feedback LimiterFeedback     // the limiter, when it adapts
	acks     *acker

	fetchCtx      context.Context // ends when fetching must stop
	stopFetch     context.CancelFunc
	handlerCtx    context.Context // parent of every handler ctx
	cancelHandler context.CancelCauseFunc
	// force ends when the ctx of any Close ends, whichever Close started
	// the shutdown: the shutdown then stops waiting for handlers.
	force     context.Context
	forceStop context.CancelCauseFunc

	fetchDone chan struct{}
	disp      *dispatcher
	unsettled sync.WaitGroup // delivered but not yet released
	keeper    *leaseKeeper   // nil when no handler runs under a lease
	workers   sync.WaitGroup // the fetch, ack and keeper goroutines

	closeMu      sync.Mutex // guards the four fields below
	closeStarted bool
	waiting      bool  // a Close other than the first is waiting
	shutdownDone bool  // closeErr is set
	errTaken     bool  // closeErr went to a caller or the observer
	closeErr     error // what the shutdown returned
	closing      chan struct{}
	done         chan struct{}
	mu           sync.Mutex
	err          error
	manual       manualLeases // AckManual deliveries waiting for settlement
	// dispatchBuf holds the pointers of the batch being dispatched; the
	// fetch loop reuses it.
	dispatchBuf []*Delivery
	stopAfter   func() bool
}

// settleTimeout bounds the backend calls the bus makes to settle a
// delivery on its own (nack, dead-letter).
const settleTimeout = 10 * time.Second

// dropLeases gives up the deliveries still waiting for a manual
// settlement when Close runs out of time, or when it ends: their slots are
// freed, and they are released to the group (without counting an attempt)
// while hard lasts, or else redelivered when their lease ends there.
func (s *Subscription) dropLeases(hard context.Context) {
	for _, d := range s.manual.drain() {
		if !d.claim() {
			continue
		}
		if hard.Err() != nil {
			d.finish(OutcomeExpired, ErrClosed)
			continue
		}
		s.release(hard, d)
	}
}

// Done is closed when the subscription has fully stopped.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err returns the error that ended the subscription: nil while it runs and
// after a clean Close, otherwise why it stopped.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Topic returns the subscribed topic.
func (s *Subscription) Topic() string { return s.topic }

// Group returns the consumer group.
func (s *Subscription) Group() string { return s.opts.group }

// Close stops the subscription, like net/http.Server.Shutdown:
//  1. it stops fetching;
//  2. it lets in-flight handlers finish until ctx ends, then cancels their
//     ctx with cause ErrClosing;
//  3. it flushes settlements;
//  4. it returns when no handler of the subscription runs, or when ctx
//     ends (plus a short grace), whichever comes first.
//
// Close never blocks past ctx, on every path: also when the shutdown was
// started by the Subscribe ctx ending or by a backend failure, and when
// Close is called twice or concurrently. Whichever Close's ctx ends first
// cancels the running handlers. A delivery whose handler the shutdown
// cancelled is given back to the group without counting as an attempt
// (see ErrClosing). Handlers that ignore their cancelled ctx are counted
// in the error, their late settlements are reported to the observer and
// dropped, and their messages come back after the lease. Done is closed
// when the last handler has returned. A Close that did not start the
// shutdown returns nil once Done is closed, or an error when its ctx ends
// first. A handler must not call Close on its own subscription (Close
// would wait for it until ctx ends); it can cancel the ctx given to
// Subscribe instead.
func (s *Subscription) Close(ctx context.Context) error {
	// Any Close whose ctx ends forces the shutdown under way.
	stop := context.AfterFunc(ctx, func() { s.forceStop(context.Cause(ctx)) })
	defer stop()
	if s.startClose() {
		return s.shutdown()
	}
	hard, cancel := withGrace(ctx)
	defer cancel()
	if !waitOrDone(hard, s.done) {
		return fmt.Errorf("bus: close subscription %q: %d handler(s) still running: %w", s.topic, s.disp.inHandler(), ctx.Err())
	}
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.shutdownDone && !s.errTaken {
		// The shutdown's error goes to one caller: the first that waits
		// for it (the background close then reports nothing).
		s.errTaken = true
		return s.closeErr
	}
	return nil
}

// startClose reports whether the caller is the first to close s: it then
// runs the shutdown. A later caller is counted as waiting for its result.
func (s *Subscription) startClose() bool {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	first := !s.closeStarted
	s.closeStarted = true
	if !first {
		s.waiting = true
	}
	return first
}

// errToReport reports whether the error of a shutdown that the Subscribe
// ctx or a backend failure started still needs reporting: not when a
// Close waits for it (that Close returns it).
func (s *Subscription) errToReport() bool {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.waiting {
		return false
	}
	s.errTaken = true
	return true
}

// shutdown runs the steps of Close once, bounded by s.force (the ctx of
// every Close) plus the grace.
func (s *Subscription) shutdown() error {
	hard, cancel := withGrace(s.force)
	defer cancel()
	close(s.closing)
	if s.stopAfter != nil {
		s.stopAfter()
	}
	s.stopFetch()
	drained := make(chan struct{})
	go func() {
		<-s.fetchDone // no delivery is pushed after the fetch loop ends
		s.disp.stop()
		close(drained)
	}()
	cancelled := s.waitHandlers(drained)
	errs := s.collect(hard, drained, cancelled)
	s.cancelHandler(ErrClosing)
	s.dropLeases(hard)
	if s.keeper != nil {
		s.keeper.close()
	}
	if err := s.acks.close(hard); err != nil {
		errs = append(errs, err)
	}
	if err := closeBounded(hard, s.bsub.Close); err != nil {
		errs = append(errs, fmt.Errorf("backend close: %w", err))
	}
	s.bus.forget(s)
	var err error
	if len(errs) > 0 {
		err = fmt.Errorf("bus: close subscription %q: %w", s.topic, errors.Join(errs...))
	}
	s.bus.opts.logger.LogAttrs(context.Background(), slog.LevelDebug, "bus: subscription closed",
		slog.String("topic", s.topic), slog.String("group", s.opts.group), slog.Bool("clean", err == nil))
	// Set before Done closes: a Close that waits for Done then finds it.
	s.closeMu.Lock()
	s.closeErr, s.shutdownDone = err, true
	s.closeMu.Unlock()
	s.finishClose(hard, drained)
	return err
}

// waitHandlers lets the running handlers finish until the shutdown is
// forced, then cancels them (cause ErrClosing); it returns how many it
// cancelled. Manual deliveries whose handler returned unsettled keep their
// lease; they are waited for until the shutdown is forced, then given back
// (dropLeases).
func (s *Subscription) waitHandlers(drained <-chan struct{}) int64 {
	cancelled := int64(0)
	select {
	case <-drained:
	case <-s.force.Done():
		cancelled = s.disp.inHandler()
		s.cancelHandler(ErrClosing)
	}
	unsettled := make(chan struct{})
	go func() {
		<-drained
		s.unsettled.Wait()
		close(unsettled)
	}()
	select {
	case <-unsettled:
	case <-s.force.Done():
		s.cancelHandler(ErrClosing)
	}
	return cancelled
}

// collect waits, until hard ends, for the handlers and the fetch loop to
// return, and says what did not.
func (s *Subscription) collect(hard context.Context, drained <-chan struct{}, cancelled int64) []error {
	var errs []error
	cause := context.Cause(s.force)
	clean := waitOrDone(hard, drained)
	if !waitOrDone(hard, s.fetchDone) {
		// A backend whose Receive ignores ctx breaks its contract; do not
		// let it hang Close past the caller's deadline.
		errs = append(errs, fmt.Errorf("backend Receive did not return after cancellation: %w", cause))
	}
	if clean && cancelled > 0 {
		errs = append(errs, fmt.Errorf("cancelled %d running handler(s) when the close ctx ended: %w", cancelled, cause))
	}
	if !clean {
		errs = append(errs, fmt.Errorf("%d handler(s) still running after their ctx was cancelled; their late settlements will be dropped and their messages redelivered after the lease: %w",
			s.disp.inHandler(), cause))
	}
	return errs
}

// finishClose closes Done once the last handler and the subscription's
// own goroutines have returned: now, or in the background after
// stragglers that ignore their ctx.
func (s *Subscription) finishClose(hard context.Context, drained <-chan struct{}) {
	finished := make(chan struct{})
	go func() {
		<-drained
		s.workers.Wait()
		close(finished)
	}()
	if waitOrDone(hard, finished) {
		close(s.done)
	} else {
		go func() {
			<-finished
			close(s.done)
		}()
	}
}

// backgroundCloseTimeout bounds the shutdown that runs when the Subscribe
// ctx ends or the backend fails for good, where no caller gives a ctx. A
// Close called meanwhile with a shorter ctx cuts it short.
const backgroundCloseTimeout = 30 * time.Second

// closeInBackground closes the subscription when no caller waits for the
// result (its ctx ended, or the backend failed); a close error goes to the
// observer.
func (s *Subscription) closeInBackground() {
	ctx, cancel := context.WithTimeout(context.Background(), backgroundCloseTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil && s.errToReport() {
		s.bus.observe(observer.Event{Scope: observer.ScopeShutdown, Topic: s.topic, Group: s.opts.group, Err: err})
	}
}

// fail ends the subscription because the backend failed for good.
func (s *Subscription) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.stopFetch()
	s.bus.goTracked(s.closeInBackground)
}

// Receive retry backoff: full jitter between 0 and an exponential cap.
const (
	receiveBackoffBase = 10 * time.Millisecond
	receiveBackoffMax  = 5 * time.Second
)

// fetch is the receive loop: take capacity, ask the backend for at most
// that many messages, start a handler per message.
func (s *Subscription) fetch() {
	defer close(s.fetchDone)
	failures := 0
	var outage observer.Outage
	// sharedWant bounds what is taken from a shared limiter: an idle
	// subscription blocked in Receive holds a single unit, so it does not
	// starve the others; the amount doubles while messages flow.
	sharedWant := 1
	for {
		n, err := s.acquire()
		if err != nil {
			return
		}
		if s.opts.limiter != nil {
			m, err := s.opts.limiter.Acquire(s.fetchCtx, min(n, sharedWant))
			if err != nil {
				s.sem.Release(n)
				return
			}
			if m < n {
				s.sem.Release(n - m)
				n = m
			}
		}
		if s.fetchCtx.Err() != nil {
			// Cancelled while waiting for capacity: no Receive starts.
			s.releaseSlots(n)
			return
		}
		msgs, err := s.bsub.Receive(s.fetchCtx, n)
		if len(msgs) > n {
			msgs = s.returnExcess(msgs, n)
		}
		if unused := n - len(msgs); unused > 0 {
			s.releaseSlots(unused)
		}
		if len(msgs) > 0 {
			s.dispatch(msgs)
		}
		if len(msgs) == 0 {
			sharedWant = 1
		} else {
			sharedWant = min(2*len(msgs), s.opts.maxInFlight)
		}
		if err != nil {
			if s.fetchCtx.Err() != nil {
				return
			}
			if errors.Is(err, ErrClosed) || backend.IsPermanent(err) {
				// No retry fixes it: end the subscription, say why once.
				err = fmt.Errorf("bus: receive %q: %w", s.topic, err)
				s.bus.observe(observer.Event{Scope: observer.ScopeReceive, Topic: s.topic, Group: s.opts.group, Err: err})
				s.fail(err)
				return
			}
			failures++
			outage.Fail(context.Background(), s.bus.opts.observer, observer.Event{Scope: observer.ScopeReceive, Topic: s.topic, Group: s.opts.group}, err)
			ceiling := min(receiveBackoffBase<<min(failures, 20), receiveBackoffMax)
			t := time.NewTimer(rand.N(ceiling) + time.Millisecond)
			select {
			case <-t.C:
			case <-s.fetchCtx.Done():
				t.Stop()
				return
			}
			continue
		}
		if failures > 0 {
			failures = 0
			outage.Recover(context.Background(), s.bus.opts.observer, observer.Event{Scope: observer.ScopeReceive, Topic: s.topic, Group: s.opts.group})
		}
	}
}

// releaseSlots gives back n slots taken for a Receive that did not fill
// them.
func (s *Subscription) releaseSlots(n int) {
	s.sem.Release(n)
	if s.opts.limiter != nil {
		s.opts.limiter.Release(n)
	}
}

// fetchLinger is how long a saturated subscription waits for a quarter of
// its capacity to free up before it fetches for fewer slots.
const fetchLinger = 2 * time.Millisecond

// acquire takes free in-flight slots for the next Receive. When every slot
// is busy it waits for a quarter of them (briefly), so that a saturated
// subscription fetches in batches rather than one message per freed slot.
func (s *Subscription) acquire() (int, error) {
	max := s.opts.maxInFlight
	if n := s.sem.tryAcquire(max/4, max); n > 0 {
		return n, nil
	}
	t := time.NewTimer(fetchLinger)
	defer t.Stop()
	return s.sem.acquire(s.fetchCtx, max/4, max, t.C)
}

// returnExcess handles a backend that broke the contract by returning more
// than it was asked for: the extra messages are handed back at once, never
// run without capacity, and the breach is reported.
func (s *Subscription) returnExcess(msgs []*backend.Message, n int) []*backend.Message {
	extra := msgs[n:]
	s.bus.observe(observer.Event{Scope: observer.ScopeReceive, Topic: s.topic, Group: s.opts.group,
		Err: fmt.Errorf("backend returned %d messages for a Receive of at most %d; handed %d back", len(msgs), n, len(extra))})
	for _, m := range extra {
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		if err := s.bsub.Nack(ctx, m.AckID, 0); err != nil {
			s.bus.observe(observer.Event{Scope: observer.ScopeNack, Topic: s.topic, Group: s.opts.group, MessageID: m.ID, Attempt: m.Attempt, Err: err})
		}
		cancel()
	}
	return msgs[:n]
}

func (s *Subscription) dispatch(msgs []*backend.Message) {
	// The Deliveries of a batch share allocations of up to deliverySlab
	// (small enough for the allocator's size classes, which keeps them
	// cheap to allocate and to free). They are never reused: user code
	// may keep a *Delivery as long as it likes (to settle it later in
	// AckManual, or to read its fields).
	var vals []Delivery
	ds := s.dispatchBuf[:0]
	received := monoNow()
	for i, m := range msgs {
		if len(vals) == 0 {
			vals = make([]Delivery, min(len(msgs)-i, deliverySlab))
		}
		d := &vals[0]
		vals = vals[1:]
		d.Message = Message{ID: m.ID, Key: m.Key, Headers: m.Headers, Payload: m.Payload}
		d.Topic = s.topic
		d.Group = s.opts.group
		d.Attempt = max(m.Attempt, 1)
		d.PublishedAt = m.PublishedAt
		d.sub = s
		d.ackID = m.AckID
		d.received = received
		ds = append(ds, d)
	}
	s.unsettled.Add(len(ds))
	s.disp.push(ds)
	clear(ds)
	s.dispatchBuf = ds[:0]
}

// deliverySlab is the most Deliveries allocated at once.
const deliverySlab = 64

// releaseDone frees the in-flight slots of n finished deliveries.
func (s *Subscription) releaseDone(n int) {
	s.sem.Release(n)
	if s.opts.limiter != nil {
		s.opts.limiter.Release(n)
	}
	s.unsettled.Add(-n)
}

// process handles one delivery on dispatcher worker w. It reports
// whether the delivery's slot is the worker's to give back (see
// handlerDone).
func (s *Subscription) process(d *Delivery, w *workerSlot) bool {
	if s.opts.ackMode != AckOnReceive && s.caps.Redelivery && d.Attempt > s.opts.maxDeliveries {
		// Redelivered past the limit without a handler verdict (leases ran
		// out): dead-letter without running the handler again.
		d.claim()
		s.deadLetter(d, fmt.Errorf("max deliveries (%d) exceeded", s.opts.maxDeliveries))
		(*handlerCtx)(d).end()
		return d.handlerDone()
	}
	if len(d.Payload) > s.bus.opts.maxPayload {
		// A foreign producer wrote more than this bus accepts: the handler
		// never sees it.
		d.claim()
		s.deadLetter(d, withCode(backend.CodeOversized, fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, len(d.Payload), s.bus.opts.maxPayload)))
		(*handlerCtx)(d).end()
		return d.handlerDone()
	}
	if s.opts.ackMode == AckOnReceive && d.claim() {
		s.settleErr(d, observer.ScopeAck, d.doAck())
	}
	var start time.Time
	if s.feedback != nil {
		start = time.Now()
	}
	err := s.call(d)
	if s.feedback != nil {
		s.feedback.Feedback(time.Since(start), err)
	}
	switch s.opts.ackMode {
	case AckOnReceive:
		s.reportHandlerErr(d, err)
	case AckOnSuccess:
		if s.shutdownCancelled(err) {
			if d.claim() {
				ctx, cancel := s.settleCtx()
				s.release(ctx, d)
				cancel()
			}
			break
		}
		s.reportHandlerErr(d, err)
		if d.claim() {
			if err == nil {
				s.ackAfterHandler(d, w)
			} else {
				s.retryOrDeadLetter(d, err)
			}
		}
	case AckManual:
		if !s.shutdownCancelled(err) {
			s.reportHandlerErr(d, err)
		}
		if !d.armLease() && d.claim() {
			d.finish(OutcomeExpired, ErrClosed)
		}
	}
	return d.handlerDone()
}

// ackAfterHandler acks a claimed delivery whose handler succeeded
// (AckOnSuccess). The worker hands the ack to the acker in the critical
// section in which it takes its next delivery, which it enters anyway
// (see dispatcher.ackLocked), so the ack takes no lock of its own: a lock
// per message that every worker shares costs more than the handlers of
// a busy subscription. The acker sees the ack at once, so it never waits
// for the worker's next handler. Once the acker is closed (the
// subscription is shutting down), the ack is refused and reported as
// before.
func (s *Subscription) ackAfterHandler(d *Delivery, w *workerSlot) {
	if s.acks.isClosed() {
		s.settleErr(d, observer.ScopeAck, d.doAck())
		return
	}
	w.ack = d
	d.finish(OutcomeAcked, nil)
}

// call runs the handler with its ctx, turning a panic into an error.
// While it runs, the keeper keeps the delivery's lease alive, or cancels
// ctx with cause ErrLeaseLost when it cannot; ctx ends when the handler
// returns.
func (s *Subscription) call(d *Delivery) (err error) {
	d.state.Or(stateInHandler)
	defer d.state.And(^stateInHandler)
	var ctx context.Context = s.handlerCtx
	if s.keeper != nil {
		hc := (*handlerCtx)(d)
		ctx = hc
		defer hc.end()
	}
	if s.opts.handlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.opts.handlerTimeout)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: debug.Stack()}
		}
	}()
	err = s.handler(ctx, d)
	if err == nil && s.opts.handlerTimeout > 0 && ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("handler timed out after %v: %w", s.opts.handlerTimeout, ctx.Err())
	}
	return err
}

func (s *Subscription) reportHandlerErr(d *Delivery, err error) {
	if err == nil {
		return
	}
	var p *panicError
	if errors.As(err, &p) {
		s.bus.observe(observer.Event{Scope: observer.ScopePanic, Topic: s.topic, Group: s.opts.group, MessageID: d.ID, Attempt: d.Attempt, Err: err, Stack: p.stack})
		return
	}
	s.report(d, observer.ScopeHandler, err)
}

// retryOrDeadLetter settles a failed delivery (already claimed).
func (s *Subscription) retryOrDeadLetter(d *Delivery, err error) {
	switch {
	case IsPermanent(err):
		s.deadLetter(d, err)
	case !s.caps.Redelivery:
		s.deadLetter(d, fmt.Errorf("backend cannot redeliver: %w", err))
	case d.Attempt >= s.opts.maxDeliveries:
		s.deadLetter(d, fmt.Errorf("max deliveries (%d) reached: %w", s.opts.maxDeliveries, err))
	default:
		delay, ok := retryDelay(s.opts.newBackOff, d.Attempt)
		if !ok {
			s.deadLetter(d, fmt.Errorf("retry backoff stopped: %w", err))
			return
		}
		ctx, cancel := s.settleCtx()
		defer cancel()
		s.settleErr(d, observer.ScopeNack, d.doNack(ctx, delay))
	}
}

// shutdownCancelled reports whether a handler's error comes from the
// shutdown: the subscription cancelled its handlers (cause ErrClosing),
// and the error is not one the handler marked Permanent. Such an error is
// not a failure of the message.
func (s *Subscription) shutdownCancelled(err error) bool {
	return err != nil && s.handlerCtx.Err() != nil && !IsPermanent(err)
}

// release gives a claimed delivery back to the group without counting an
// attempt (backend.Releaser), or with a nack without delay on a backend
// that cannot. A stale delivery (its lease ran out meanwhile) is already
// back with the group, and is not reported.
func (s *Subscription) release(ctx context.Context, d *Delivery) {
	var err error
	if r, ok := s.bsub.(backend.Releaser); ok {
		err = r.Release(ctx, d.ackID)
	} else {
		err = s.bsub.Nack(ctx, d.ackID, 0)
	}
	if err != nil && !errors.Is(err, backend.ErrStale) {
		err = fmt.Errorf("bus: release %q: %w", d.ID, err)
		s.report(d, observer.ScopeNack, err)
	}
	d.finish(OutcomeNacked, err)
}

// deadLetter settles a claimed delivery on the bus's own initiative,
// reporting a failure to the observer.
func (s *Subscription) deadLetter(d *Delivery, reason error) {
	ctx, cancel := s.settleCtx()
	defer cancel()
	s.settleErr(d, observer.ScopeDeadLetter, d.doDeadLetter(ctx, reason))
}

// settleCtx bounds a settlement the bus makes itself; it outlives the
// handler's cancellation so shutdown still settles.
func (s *Subscription) settleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(s.handlerCtx), settleTimeout)
}

func (s *Subscription) settleErr(d *Delivery, scope observer.Scope, err error) {
	if err != nil {
		s.report(d, scope, err)
	}
}

// reportDeadLetter tells the observer that d was dead-lettered or dropped,
// and why: one event per message, with its code.
func (s *Subscription) reportDeadLetter(d *Delivery, code backend.DeadLetterCode, reason error) {
	s.bus.observe(observer.Event{Scope: observer.ScopeDeadLetter, Topic: s.topic, Group: s.opts.group, MessageID: d.ID, Attempt: d.Attempt, Code: string(code), Err: reason})
}

func (s *Subscription) report(d *Delivery, scope observer.Scope, err error) {
	s.bus.observe(observer.Event{Scope: scope, Topic: s.topic, Group: s.opts.group, MessageID: d.ID, Attempt: d.Attempt, Err: err})
}

type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panic: %v", e.value) }

// Unwrap returns the panic value when it is an error.
func (e *panicError) Unwrap() error {
	err, _ := e.value.(error)
	return err
}

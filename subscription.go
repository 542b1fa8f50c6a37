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
	cancelHandler context.CancelFunc

	fetchDone chan struct{}
	disp      *dispatcher
	unsettled sync.WaitGroup // delivered but not yet released
	keeper    *leaseKeeper   // nil when no handler runs under a lease
	workers   sync.WaitGroup // the fetch, ack and keeper goroutines

	closeOnce sync.Once
	closing   chan struct{}
	done      chan struct{}
	mu        sync.Mutex
	err       error
	manual    manualLeases // AckManual deliveries waiting for settlement
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
// freed and the backend redelivers them when their lease ends there.
func (s *Subscription) dropLeases() {
	for _, d := range s.manual.drain() {
		if d.claim() {
			d.finish(OutcomeExpired, ErrClosed)
		}
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
//     ctx;
//  3. it flushes settlements;
//  4. it returns when no handler of the subscription runs, or when ctx
//     ends (plus a short grace), whichever comes first.
//
// Close never blocks past ctx: handlers that ignore their cancelled ctx
// are counted in the error, their late settlements are reported to the
// observer and dropped, and their messages come back after the lease.
// Manual deliveries still unsettled when ctx ends are given back the same
// way. Done is closed when the last handler has returned. A second Close
// waits for Done until its own ctx ends. A handler must not call Close on
// its own subscription (Close would wait for it until ctx ends); it can
// cancel the ctx given to Subscribe instead.
func (s *Subscription) Close(ctx context.Context) error {
	hard, cancel := withGrace(ctx)
	defer cancel()
	return s.closeWith(ctx, hard)
}

// closeWith is Close with the hard deadline (ctx plus the grace) given.
func (s *Subscription) closeWith(ctx, hard context.Context) error {
	var err error
	first := false
	s.closeOnce.Do(func() {
		first = true
		err = s.shutdown(ctx, hard)
	})
	if !first {
		select {
		case <-s.done:
		case <-ctx.Done():
			return fmt.Errorf("bus: close subscription %q: %w", s.topic, ctx.Err())
		}
	}
	return err
}

func (s *Subscription) shutdown(ctx, hard context.Context) error {
	close(s.closing)
	if s.stopAfter != nil {
		s.stopAfter()
	}
	s.stopFetch()
	var errs []error

	drained := make(chan struct{})
	go func() {
		<-s.fetchDone // no delivery is pushed after the fetch loop ends
		s.disp.stop()
		close(drained)
	}()
	cancelled := int64(0)
	select {
	case <-drained:
	case <-ctx.Done():
		cancelled = s.disp.inHandler()
		s.cancelHandler()
	}
	// Manual deliveries whose handler returned unsettled keep their
	// lease; wait for their settlement until ctx ends, then give them
	// back to the backend by letting the lease run out there.
	unsettled := make(chan struct{})
	go func() {
		<-drained
		s.unsettled.Wait()
		close(unsettled)
	}()
	select {
	case <-unsettled:
	case <-ctx.Done():
		s.cancelHandler()
		s.dropLeases()
	}
	clean := waitOrDone(hard, drained)
	if !waitOrDone(hard, s.fetchDone) {
		// A backend whose Receive ignores ctx breaks its contract; do not
		// let it hang Close past the caller's deadline.
		errs = append(errs, fmt.Errorf("backend Receive did not return after cancellation: %w", ctx.Err()))
	}
	if clean && cancelled > 0 {
		errs = append(errs, fmt.Errorf("cancelled %d running handler(s) when the close ctx ended: %w", cancelled, ctx.Err()))
	}
	if !clean {
		errs = append(errs, fmt.Errorf("%d handler(s) still running after their ctx was cancelled; their late settlements will be dropped and their messages redelivered after the lease: %w",
			s.disp.inHandler(), ctx.Err()))
	}
	s.cancelHandler()
	s.dropLeases()
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
	// Done closes once the last handler and the subscription's own
	// goroutines have returned: now, or in the background after
	// stragglers that ignore their ctx.
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
	return err
}

// backgroundCloseTimeout bounds the shutdown that runs when the Subscribe
// ctx ends or the backend fails for good, where no caller gives a ctx.
const backgroundCloseTimeout = 30 * time.Second

// closeInBackground closes the subscription when no caller waits for the
// result (its ctx ended, or the backend failed); a close error goes to the
// observer.
func (s *Subscription) closeInBackground() {
	ctx, cancel := context.WithTimeout(context.Background(), backgroundCloseTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil {
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
		s.reportHandlerErr(d, err)
		if d.claim() {
			if err == nil {
				s.ackAfterHandler(d, w)
			} else {
				s.retryOrDeadLetter(d, err)
			}
		}
	case AckManual:
		s.reportHandlerErr(d, err)
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
		if s.handlerCtx.Err() != nil {
			delay = 0 // shutting down: let another member take it now
		}
		ctx, cancel := s.settleCtx()
		defer cancel()
		s.settleErr(d, observer.ScopeNack, d.doNack(ctx, delay))
	}
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

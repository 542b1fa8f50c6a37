package bus

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/observer"
)

// process handles one delivery on dispatcher worker w. It reports
// whether the delivery's slot is the worker's to give back (see
// handlerDone).
func (s *consumer) process(d *record, w *workerSlot) bool {
	special := d.special()
	if special && s.early(d) {
		return d.handlerDone()
	}
	if len(d.pub.Headers) > 0 && s.replayedElsewhere(d) {
		// Replayed from another group's hold: this group handled it.
		if d.claim() {
			s.settleErr(d, observer.ScopeAck, d.doAck())
		}
		(*handlerCtx)(d).end()
		return d.handlerDone()
	}
	if s.holds != nil && d.pub.Key != "" && s.holdStep(d) {
		(*handlerCtx)(d).end()
		return d.handlerDone()
	}
	if reason := s.refuseIf(special, d); reason != nil {
		// The handler never sees it: dead-letter it at once.
		d.claim()
		s.deadLetter(d, reason)
		(*handlerCtx)(d).end()
		return d.handlerDone()
	}
	if s.cfg.Decoder != nil && !s.decode(d) {
		(*handlerCtx)(d).end()
		return d.handlerDone()
	}
	if s.cfg.AckMode == AckOnReceive && d.claim() {
		s.settleErr(d, observer.ScopeAck, d.doAck())
	}
	var err error
	if s.cfg.Feedback == nil && s.cfg.Event == nil && !w.timed {
		err = s.call(d) // callObserved's common case, without its call
	} else {
		err = s.callObserved(d, w)
	}
	switch s.cfg.AckMode {
	case AckOnReceive:
		s.reportHandlerErr(d, err)
	case AckOnSuccess:
		if s.settleAfterHandler(d, w, err) {
			return true // marked done with its ack (finishReturned)
		}
	case AckManual:
		if s.snoozedBy(d, err) {
			break
		}
		if !s.shutdownCancelled(err) {
			s.reportHandlerErr(d, err)
		}
		if !d.armLease() && d.claim() {
			d.finish(OutcomeLeaseLost, ErrClosed)
		}
	}
	return d.handlerDone()
}

// decode runs the subscription's decoder on d and reports whether d goes
// on to the handler; one that does not is settled here: acked when the
// decoder skips it, dead-lettered (code undecodable unless the error
// carries one) when it cannot decode it.
func (s *consumer) decode(d *record) bool {
	v, err := s.cfg.Decoder.decode(&d.pub)
	switch {
	case err == nil:
		(*handlerCtx)(d).setDecoded(v)
		return true
	case errors.Is(err, errSkip):
		if d.claim() {
			s.settleErr(d, observer.ScopeAck, d.doAck())
		}
	default:
		d.claim()
		s.deadLetter(d, withCode(backend.CodeUndecodable, err))
	}
	return false
}

// callObserved calls the handler on worker w, timing it for the
// feedback and for the worker (workerSlot.timed) and emitting its
// lifecycle events, through the worker's stage, when either is on.
func (s *consumer) callObserved(d *record, w *workerSlot) error {
	if s.cfg.Feedback == nil && s.cfg.Event == nil {
		if !w.timed {
			return s.call(d)
		}
		start := monoNow()
		err := s.call(d)
		w.took = monoNow() - start
		return err
	}
	var st *lifecycle.Stage
	if s.cfg.Event != nil {
		if w.events == nil {
			w.events = s.cfg.Event.Stage()
		}
		st = w.events
	}
	var ev lifecycle.Event
	start := s.started(d, st, &ev)
	err := s.call(d)
	took := s.handled(st, &ev, start, err)
	if w.timed {
		w.took = int64(took)
	}
	return err
}

// started returns when d's handler starts (monoNow), when the feedback
// or the lifecycle events need it, and emits d's received event to st
// (nil: events are off), built in ev, stamped with that reading.
func (s *consumer) started(d *record, st *lifecycle.Stage, ev *lifecycle.Event) int64 {
	now := monoNow()
	if st != nil {
		*ev = s.lifecycleEvent(d, lifecycle.Received, now)
		st.Emit(ev)
	}
	return now
}

// handled gives the handler's latency and error to the feedback, and
// emits d's succeeded or failed event to st (nil: events are off), made
// from its received event ev; a snooze and a shutdown's cancellation are
// neither. The clock is read once, for the latency and the event's time,
// and the latency is returned.
func (s *consumer) handled(st *lifecycle.Stage, ev *lifecycle.Event, start int64, err error) time.Duration {
	now := monoNow()
	took := time.Duration(now - start)
	for _, f := range s.cfg.Feedback {
		f.Feedback(took, err)
	}
	if st == nil {
		return took
	}
	ev.Kind, ev.Mono, ev.Duration = lifecycle.Succeeded, now, took
	if err != nil {
		if _, snoozed := backend.SnoozeOf(err); snoozed && s.cfg.Caps.Redelivery || s.shutdownCancelled(err) {
			return took
		}
		ev.Kind, ev.Error = lifecycle.Failed, lifecycle.CutError(err.Error())
	}
	st.Emit(ev)
	return took
}

// refuseIf is refuse for a delivery that is special (see record.special),
// and nil for one that is not: refuse has nothing to say of it.
func (s *consumer) refuseIf(special bool, d *record) error {
	if !special {
		return nil
	}
	return s.refuse(d)
}

// special reports whether d may be early (a DeliverAt), expired (an
// ExpiresAt), past its max deliveries (a redelivery) or oversized: what
// a delivery must be for early or refuse to hold it back.
func (d *record) special() bool {
	return !d.pub.DeliverAt.IsZero() || !d.pub.ExpiresAt.IsZero() || d.attempt > 1 || d.state.Load()&stateOversized != 0
}

// refuse returns why d must not reach the handler, or nil.
func (s *consumer) refuse(d *record) error {
	if s.cfg.AckMode != AckOnReceive && s.cfg.Caps.Redelivery && int(d.attempt) > s.cfg.MaxDeliveries {
		// Redelivered past the limit without a handler verdict (leases ran
		// out).
		return fmt.Errorf("max deliveries (%d) exceeded", s.cfg.MaxDeliveries)
	}
	if exp, ok := s.expiry(d); ok && !time.Now().Before(exp) {
		return withCode(backend.CodeExpired, fmt.Errorf("expired at %s, before its handler started", exp.UTC().Format(time.RFC3339Nano)))
	}
	if d.state.Load()&stateOversized != 0 {
		// A foreign producer wrote more than this bus accepts.
		return withCode(backend.CodeOversized, fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, len(d.pub.Payload), s.cfg.MaxPayload))
	}
	return nil
}

// settleAfterHandler settles an AckOnSuccess delivery by its handler's
// error: ack, retry or dead-letter; a delivery whose handler the shutdown
// cancelled is released without counting an attempt. It reports whether
// it marked the handler done too, as an ack may (see ackAfterHandler).
func (s *consumer) settleAfterHandler(d *record, w *workerSlot, err error) bool {
	if err == nil && d.ext.Load() == nil {
		// The common case: neither fenced out (see fencedOut) nor a
		// shutdown's cancellation, a snooze or a failure.
		return d.claim() && s.ackAfterHandler(d, w)
	}
	if err != nil && s.fencedOut(d) || s.shutdownCancelled(err) {
		// The group lock passed on, or the shutdown cancelled the
		// handler: not a failure of the message. A handler that
		// returned nil all the same handled its message, which is
		// acked, fenced or not: given back, it would run again.
		if d.claim() {
			s.releaseNow(d)
		}
		return false
	}
	if s.snoozedBy(d, err) {
		return false
	}
	s.reportHandlerErr(d, err)
	if !d.claim() {
		return false
	}
	if err == nil {
		return s.ackAfterHandler(d, w)
	}
	s.retryOrDeadLetter(d, err)
	return false
}

// ackAfterHandler acks a claimed delivery whose handler succeeded
// (AckOnSuccess), through the ack buffer of worker w, which no other
// worker locks (see ackBuf). Once the acker is closed (the subscription
// is shutting down), the ack is refused and reported. Without key
// ordering it marks the handler done with the ack (finishReturned) and
// reports true: the slot is then the caller's to give back.
func (s *consumer) ackAfterHandler(d *record, w *workerSlot) bool {
	if r := d.resultOf(); r != nil {
		ctx, cancel := s.settleCtx()
		defer cancel()
		if err := d.ackResult(ctx, *r); err != nil {
			s.report(d, observer.ScopeAck, err)
		}
		return false
	}
	err := w.acks.add(d.ackID)
	if err != nil {
		err = d.ackErr(err)
		s.report(d, observer.ScopeAck, err)
	}
	if s.keys != nil {
		d.finish(OutcomeAcked, err)
		return false
	}
	d.finishReturned(OutcomeAcked, err)
	return true
}

// fencedOut reports whether d's lease was given up because the group lock
// passed to another member (errFenced). Only a delivery the lease keeper
// acted on can be.
func (s *consumer) fencedOut(d *record) bool {
	return s.keeper != nil && d.ext.Load() != nil && errors.Is(context.Cause((*handlerCtx)(d)), errFenced)
}

// call runs the handler with its ctx, turning a panic into an error.
// While it runs, the keeper keeps the delivery's lease alive, or cancels
// ctx with cause ErrLeaseLost when it cannot; ctx ends when the handler
// returns.
func (s *consumer) call(d *record) (err error) {
	d.state.Or(stateInHandler)
	var ctx context.Context = s.handlerCtx
	hc := (*handlerCtx)(d)
	if s.keeper != nil {
		if s.leaseLost(d) {
			// Its lease was given up before it started (fenced): the
			// handler never sees it.
			err := context.Cause(hc)
			hc.end()
			d.state.And(^stateInHandler)
			return err
		}
		ctx = hc
	}
	// One deferred call for the three steps every return takes: turn a
	// panic into an error, end the handler's ctx, mark the handler out.
	// Only a call that did not return (a panic, or runtime.Goexit, which
	// recover does not stop) asks recover.
	returned := false
	defer func() {
		if !returned {
			if r := recover(); r != nil {
				err = &panicError{Value: r, Stack: debug.Stack()}
			}
		}
		if s.keeper != nil {
			hc.end()
		}
		d.state.And(^stateInHandler)
	}()
	if s.cfg.HandlerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.HandlerTimeout)
		defer cancel()
	}
	err = s.cfg.Handler(ctx, &d.pub)
	if err == nil && s.cfg.HandlerTimeout > 0 && ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("handler timed out after %v: %w", s.cfg.HandlerTimeout, ctx.Err())
	}
	returned = true
	return err
}

func (s *consumer) reportHandlerErr(d *record, err error) {
	if err == nil {
		return
	}
	var p *panicError
	if errors.As(err, &p) {
		e := s.event(d, observer.ScopePanic, err)
		e.Stack = p.Stack
		s.observe(e)
		return
	}
	s.report(d, observer.ScopeHandler, err)
}

// retryOrDeadLetter settles a failed delivery (already claimed).
func (s *consumer) retryOrDeadLetter(d *record, err error) {
	attempt := int(d.attempt)
	switch {
	case backend.IsPermanent(err):
		s.deadLetter(d, err)
	case !s.cfg.Caps.Redelivery:
		s.deadLetter(d, fmt.Errorf("backend cannot redeliver: %w", err))
	case attempt >= s.cfg.MaxDeliveries:
		s.deadLetter(d, fmt.Errorf("max deliveries (%d) reached: %w", s.cfg.MaxDeliveries, err))
	default:
		delay, ok := backend.RetryAfterOf(err)
		if !ok {
			delay, ok = retryDelay(s.cfg.NewBackOff, attempt)
		}
		if !ok {
			s.deadLetter(d, fmt.Errorf("retry backoff stopped: %w", err))
			return
		}
		delay = capDelay(max(delay, 0))
		if exp, ok := s.expiry(d); ok && !time.Now().Add(delay).Before(exp) {
			s.deadLetter(d, withCode(backend.CodeExpired, fmt.Errorf("the retry in %v would come after it expires at %s: %w", delay, exp.UTC().Format(time.RFC3339Nano), err)))
			return
		}
		s.emitDelay(d, lifecycle.RetryScheduled, delay)
		if s.keys != nil && s.keys.retry(d, delay, true) {
			return
		}
		ctx, cancel := s.settleCtx()
		defer cancel()
		s.settleErr(d, observer.ScopeNack, d.doNack(ctx, delay))
	}
}

// snoozedBy snoozes d when its handler returned a Snooze error (and the
// backend redelivers), unless the handler settled d itself; it reports
// whether err was a snooze. A snooze is not a failure: it is not
// reported.
func (s *consumer) snoozedBy(d *record, err error) bool {
	if err == nil {
		return false // and SnoozeOf's errors.As target stays off the heap
	}
	delay, ok := backend.SnoozeOf(err)
	if !ok || !s.cfg.Caps.Redelivery {
		return false
	}
	if d.claim() {
		ctx, cancel := s.settleCtx()
		s.settleErr(d, observer.ScopeNack, s.snooze(ctx, d, delay))
		cancel()
	}
	return true
}

// shutdownCancelled reports whether a handler's error comes from the
// shutdown: the subscription cancelled its handlers (cause ErrClosing),
// and the error is not one the handler marked Permanent. Such an error is
// not a failure of the message.
func (s *consumer) shutdownCancelled(err error) bool {
	return err != nil && s.handlerCtx.Err() != nil && !backend.IsPermanent(err)
}

// release gives a claimed delivery back to the group without counting an
// attempt (backend.Releaser), or with a nack without delay on a backend
// that cannot. A stale delivery (its lease ran out meanwhile) is already
// back with the group, and is not reported.
func (s *consumer) release(ctx context.Context, d *record) {
	err := d.beforeGiveBack(ctx)
	switch r, ok := s.bsub.(backend.Releaser); {
	case err != nil:
	case ok:
		err = r.Release(ctx, d.ackID)
	default:
		err = s.bsub.Nack(ctx, d.ackID, 0)
	}
	if err != nil && !errors.Is(err, backend.ErrStale) {
		// The broker may hold it until its lease ends. A stale one is
		// back with the group already: its lease ended, or another
		// member has it.
		s.notGivenBack(d)
		err = fmt.Errorf("bus: release %q: %w", d.pub.ID, err)
		s.report(d, observer.ScopeNack, err)
	}
	d.finish(OutcomeNacked, err)
}

// notGivenBack records that d is left to its lease: the deliveries of
// its key after it are too (keyLines.giveBack), and the close is not
// clean.
func (s *consumer) notGivenBack(d *record) {
	d.state.Or(stateNotBack)
	s.notBack.Store(true)
}

// deadLetter settles a claimed delivery on the bus.s own initiative,
// reporting a failure to the observer.
func (s *consumer) deadLetter(d *record, reason error) {
	ctx, cancel := s.settleCtx()
	defer cancel()
	s.settleErr(d, observer.ScopeDeadLetter, d.doDeadLetter(ctx, reason))
}

// releaseNow gives a claimed delivery back to the group, uncounted, within
// settleCtx.
func (s *consumer) releaseNow(d *record) {
	ctx, cancel := s.settleCtx()
	defer cancel()
	s.release(ctx, d)
}

// settleCtx bounds a settlement the bus makes itself; it outlives the
// handler's cancellation so shutdown still settles.
func (s *consumer) settleCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(s.handlerCtx), settleTimeout)
}

func (s *consumer) settleErr(d *record, scope observer.Scope, err error) {
	if err != nil {
		s.report(d, scope, err)
	}
}

// settleTimeout bounds the backend calls the bus makes to settle a
// delivery on its own (nack, release, dead-letter).
const settleTimeout = 10 * time.Second

// retryDelay returns the backoff delay for the given attempt, and false
// when the policy says stop.
func retryDelay(newBackOff func() backoff.BackOff, attempt int) (time.Duration, bool) {
	b := newBackOff()
	b.Reset()
	var d time.Duration
	for i := 0; i < max(attempt, 1); i++ {
		d = b.NextBackOff()
		if d == backoff.Stop {
			return 0, false
		}
	}
	return d, true
}

// panicError is a handler panic turned into an error.
type panicError struct {
	Value any
	Stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *panicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// codedReason is a dead-letter reason with its machine-readable code.
type codedReason struct {
	code backend.DeadLetterCode
	err  error
}

func (r *codedReason) Error() string { return r.err.Error() }
func (r *codedReason) Unwrap() error { return r.err }

// withCode attaches a dead-letter code to reason, unless it has one.
func withCode(code backend.DeadLetterCode, reason error) error {
	var c *codedReason
	if errors.As(reason, &c) {
		return reason
	}
	return &codedReason{code: code, err: reason}
}

// reasonCode is the code of a dead-letter reason: the one attached with
// WithCode, else rejected for a rejected error, else max_deliveries (the
// bus gave up redelivering).
func reasonCode(reason error) backend.DeadLetterCode {
	var c *codedReason
	switch {
	case errors.As(reason, &c):
		return c.code
	case backend.IsPermanent(reason):
		return backend.CodeRejected
	default:
		return backend.CodeMaxDeliveries
	}
}

// expiry is when d's message expires, if it does.
func (s *consumer) expiry(d *record) (time.Time, bool) {
	exp := d.pub.ExpiresAt
	return exp, !exp.IsZero()
}

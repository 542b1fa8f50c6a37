package bus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/observer"
)

// record is the bus's record of one delivery: the public Delivery handed
// to the handler, inline, and the state of the delivery's life (see the
// package doc's diagram). The handler's Delivery points back at it, so a
// copy of the Delivery settles the same record. The settlement methods
// are safe for concurrent use; the first settlement wins.
type record struct {
	pub Delivery

	// The fields below are kept few and small: a record is allocated per
	// message, and the garbage collector pays for every byte.

	sub   *consumer
	ackID backend.AckID
	// received is when the delivery's batch came from the backend, the
	// start of its lease, on the monoNow clock.
	received int64
	// ctx is the handler's ctx once made, and the decoder's value of the
	// delivery (see cancelCause).
	ctx atomic.Pointer[cancelCause]
	// ext holds the state few deliveries need; allocated, and its fields
	// read and written, under sub.mu.
	ext atomic.Pointer[deliveryExt]
	// state holds the stateSettled ... stateInHandler bits and, from
	// outcomeShift on, the Outcome.
	state   atomic.Uint32
	attempt int32
}

// deliveryExt holds the state few deliveries need, so the common one
// stays small. Guarded by consumer.mu.
type deliveryExt struct {
	dlqCode backend.DeadLetterCode // why it was dead-lettered or dropped
	hooks   []func(Outcome, error)
	// leaseEnd is when the lease ends (monoNow clock), once Extend moved
	// it or a manual delivery was queued; 0: received plus the ack timeout.
	leaseEnd int64
	// leaseIdx is 1 + the index in the subscription's manual heap, 0 when
	// not queued.
	leaseIdx int
	// kept is what the lease keeper knows of a running handler whose
	// lease it had to act on.
	kept keptLease
	// result is what the handler left for the ack to store
	// (Delivery.SetResult); nil: none.
	result *[]byte
}

const (
	stateSettled  uint32 = 1 << iota // a settlement has claimed the delivery
	stateFinished                    // the settlement has completed
	stateHandlerDone
	stateReleased
	stateCtxEnded  // the handler returned: its ctx is cancelled
	stateInHandler // the handler runs now
	stateOversized // the payload is over the max payload
	// stateWaiting: the delivery waits for its key (keyLines) and holds a
	// unit of the waiting set instead of an in-flight slot.
	stateWaiting
	// stateNotBack: giving the delivery back failed (not as stale), or
	// it was left to its lease: the broker may hold it until the lease
	// ends, so the deliveries of its key after it are left to their
	// leases too.
	stateNotBack
	// stateBack: a settlement gives the delivery back (a nack, a
	// release, a snooze): its lease is extended no more.
	stateBack

	outcomeShift = 10
)

// extLocked returns d.ext, allocating it; sub.mu must be held.
func (d *record) extLocked() *deliveryExt {
	x := d.ext.Load()
	if x == nil {
		x = &deliveryExt{}
		d.ext.Store(x)
	}
	return x
}

// ack is Delivery.Ack.
func (d *record) ack(ctx context.Context) error {
	if !d.claim() {
		return d.alreadySettled("ack")
	}
	return d.doAck()
}

// nack is Delivery.Nack.
func (d *record) nack(ctx context.Context, delay time.Duration) error {
	if err := d.claimRedelivery("nack", delay); err != nil {
		return err
	}
	delay = capDelay(delay)
	d.sub.emitDelay(d, lifecycle.RetryScheduled, delay)
	if k := d.sub.keys; k != nil && k.retry(d, delay, true) {
		return nil
	}
	return d.doNack(ctx, delay)
}

// claimRedelivery checks a settlement that gives the delivery back after
// delay (a nack, a snooze) and takes the right to settle. A snooze needs
// a positive delay: one of 0 would give the message back at once without
// counting an attempt, again and again.
func (d *record) claimRedelivery(op string, delay time.Duration) error {
	if delay < 0 {
		return fmt.Errorf("bus: %s: %w: negative delay %v", op, ErrInvalidOption, delay)
	}
	if delay == 0 && op == "snooze" {
		return fmt.Errorf("bus: snooze: %w: delay 0s: a snooze needs a positive delay (Nack(ctx, 0) retries at once)", ErrInvalidOption)
	}
	if caps := d.sub.cfg.Caps; !caps.Redelivery {
		return fmt.Errorf("bus: %s: %w: %s does not redeliver", op, ErrUnsupported, caps.Name)
	}
	if !d.claim() {
		return d.alreadySettled(op)
	}
	return nil
}

// reject is Delivery.Reject.
func (d *record) reject(ctx context.Context, reason error) error {
	if reason == nil {
		reason = errors.New("rejected")
	}
	if !d.claim() {
		return d.alreadySettled("reject")
	}
	return d.doDeadLetter(ctx, withCode(backend.CodeRejected, reason))
}

// extend is Delivery.Extend.
func (d *record) extend(ctx context.Context) error {
	if d.state.Load()&stateSettled != 0 {
		return d.alreadySettled("extend")
	}
	if err := d.extendLease(ctx); err != nil {
		return err
	}
	if k := d.sub.keeper; k != nil {
		k.renewed(d, monoNow())
	}
	return nil
}

// extendLease restarts the lease through the backend and moves the
// bus-side deadline of a manual delivery with it.
func (d *record) extendLease(ctx context.Context) error {
	s := d.sub
	ext, ok := s.bsub.(backend.Extender)
	if !ok {
		return fmt.Errorf("bus: extend: %w: %s cannot extend leases", ErrUnsupported, s.cfg.Caps.Name)
	}
	start := monoNow()
	if err := ext.Extend(ctx, d.ackID); err != nil {
		return fmt.Errorf("bus: extend %q: %w", d.pub.ID, err)
	}
	s.mu.Lock()
	x := d.extLocked()
	x.leaseEnd = max(x.leaseEnd, start+int64(s.cfg.AckTimeout))
	if s.cfg.AckMode == AckManual {
		s.manual.moveLocked(x, x.leaseEnd)
	}
	s.mu.Unlock()
	return nil
}

// onSettle is Delivery.OnSettle.
func (d *record) onSettle(fn func(Outcome, error)) {
	s := d.sub
	s.mu.Lock()
	// Store ext, then read the outcome; finish stores the outcome, then
	// reads ext: one of the two sees the other.
	x := d.extLocked()
	if o := d.outcome(); o != OutcomePending {
		s.mu.Unlock()
		fn(o, nil)
		return
	}
	x.hooks = append(x.hooks, fn)
	s.mu.Unlock()
}

// outcome is Delivery.Outcome.
func (d *record) outcome() Outcome { return Outcome(d.state.Load() >> outcomeShift) }

// deadLetterCode is Delivery.DeadLetterCode.
func (d *record) deadLetterCode() backend.DeadLetterCode {
	if d.ext.Load() == nil {
		return ""
	}
	d.sub.mu.Lock()
	defer d.sub.mu.Unlock()
	return d.ext.Load().dlqCode
}

func (d *record) setDeadLetterCode(c backend.DeadLetterCode) {
	d.sub.mu.Lock()
	d.extLocked().dlqCode = c
	d.sub.mu.Unlock()
}

// claim takes the right to settle. It fails if another settlement won.
func (d *record) claim() bool {
	for {
		s := d.state.Load()
		if s&stateSettled != 0 {
			return false
		}
		if d.state.CompareAndSwap(s, s|stateSettled) {
			return true
		}
	}
}

// claimed reports whether a settlement has claimed d.
func (d *record) claimed() bool { return d.state.Load()&stateSettled != 0 }

func (d *record) alreadySettled(op string) error {
	return fmt.Errorf("bus: %s %q: %w (%s)", op, d.pub.ID, ErrAlreadySettled, d.outcome())
}

func (d *record) doAck() error {
	if r := d.resultOf(); r != nil {
		ctx, cancel := d.sub.settleCtx()
		defer cancel()
		return d.ackResult(ctx, *r)
	}
	err := d.sub.acks.add(d.ackID)
	if err != nil {
		err = d.ackErr(err)
	}
	d.finish(OutcomeAcked, err)
	return err
}

// ackErr is the error of an ack of d the acker refused.
func (d *record) ackErr(err error) error {
	return fmt.Errorf("bus: ack %q: %w", d.pub.ID, err)
}

// capDelay is delay cut to backend.MaxDelay: a longer delay waits
// MaxDelay, so that no due time overflows what a broker carries.
func capDelay(delay time.Duration) time.Duration { return min(delay, backend.MaxDelay) }

func (d *record) doNack(ctx context.Context, delay time.Duration) error {
	err := d.beforeGiveBack(ctx)
	if err == nil {
		err = d.sub.bsub.Nack(ctx, d.ackID, delay)
	}
	if err != nil {
		err = fmt.Errorf("bus: nack %q: %w", d.pub.ID, err)
	}
	d.finish(OutcomeNacked, err)
	return err
}

// doDeadLetter moves the message to the dead-letter topic, or drops it
// when dead-lettering is off; either is reported once, with its code. A
// key's head that cannot be moved is retried in its key line (see
// keyLines.retry), so that no later message of its key runs before it.
func (d *record) doDeadLetter(ctx context.Context, reason error) error {
	s := d.sub
	topic := s.cfg.DeadLetter
	code := reasonCode(reason)
	d.setDeadLetterCode(code)
	at := monoNow()
	if topic == "" {
		err := s.acks.add(d.ackID)
		s.reportDeadLetter(d, code, fmt.Errorf("dropped, dead-lettering is off: %w", reason))
		if s.cfg.Event != nil && err == nil {
			s.emitDeadLetter(d, code, "", reason, at)
		}
		d.finish(OutcomeDropped, err)
		return err
	}
	cp := d.deadLetterCopy(code, reason)
	holds := s.markHold(d, cp, code, reason)
	var err error
	if dl, ok := s.bsub.(backend.DeadLetterer); ok {
		err = dl.DeadLetter(ctx, d.ackID, topic, cp)
	} else if err = s.bus.be.Publish(ctx, topic, []*backend.Message{cp}); err == nil {
		err = s.acks.add(d.ackID)
	}
	if err != nil {
		err = fmt.Errorf("bus: dead-letter %q to %q: %w", d.pub.ID, topic, err)
		// A key's head that could not be moved keeps its key: it is
		// delivered again here, uncounted, before any later message of
		// the key, and settled again then.
		if k := s.keys; k != nil && k.retry(d, deadLetterRetry, false) {
			return err
		}
	} else {
		if holds {
			// Before the key's next delivery runs (done follows finish).
			s.holds.set(d.pub.Key, d.pub.ID)
		}
		s.reportDeadLetter(d, code, fmt.Errorf("moved to %q: %w", topic, reason))
		if s.cfg.Event != nil {
			s.emitDeadLetter(d, code, topic, reason, at)
		}
	}
	d.finish(OutcomeDeadLettered, err)
	return err
}

// deadLetterRetry is how long a key's head whose dead-lettering failed
// waits before it is delivered again.
const deadLetterRetry = time.Second

func (d *record) deadLetterCopy(code backend.DeadLetterCode, reason error) *backend.Message {
	m := d.message()
	return backend.NewDeadLetter(&m, backend.DeadLetterInfo{
		Topic: d.sub.cfg.Topic, Group: d.sub.cfg.Group, Attempt: int(d.attempt), Code: code, Reason: reason.Error(),
	})
}

// finish records the outcome, runs the hooks and frees the slot if the
// handler is done too.
func (d *record) finish(o Outcome, err error) {
	// Of finish and handlerDone, the later one frees the slot: the one
	// whose bit finds the other's set.
	if d.complete(o, err, stateFinished)&stateHandlerDone != 0 {
		d.maybeRelease()
	}
}

// finishReturned is finish and handlerDone at once, for a delivery
// without key ordering that the worker which ran its handler settles
// after the handler returned: no one else completes a claimed delivery or
// marks its handler done, so the slot is the caller's to give back, as
// when handlerDone reports true.
func (d *record) finishReturned(o Outcome, err error) {
	d.complete(o, err, stateFinished|stateHandlerDone|stateReleased)
}

// complete records the outcome and runs the hooks, then sets bits
// (stateFinished and what else the caller marks with it) and returns the
// state from before.
func (d *record) complete(o Outcome, err error, bits uint32) uint32 {
	d.state.Or(uint32(o) << outcomeShift)
	if x := d.ext.Load(); x != nil {
		s := d.sub
		s.mu.Lock()
		hooks := x.hooks
		x.hooks = nil
		if s.cfg.AckMode == AckManual {
			s.manual.removeLocked(x)
		}
		s.mu.Unlock()
		for _, h := range hooks {
			h(o, err)
		}
	}
	return d.state.Or(bits)
}

// handlerDone marks the handler as returned. It reports whether the
// delivery is settled too: its slot is then the caller's to give back
// (consumer.free; consumer.releaseDone for a delivery that ran, which a dispatcher
// worker does in batches).
func (d *record) handlerDone() bool {
	old := d.state.Or(stateHandlerDone)
	if k := d.sub.keys; k != nil {
		k.handlerReturned(d)
	}
	if old&stateFinished == 0 {
		return false // finish frees the slot
	}
	return d.takeRelease()
}

// maybeRelease frees the in-flight slot (or waiting unit) once the
// handler has returned and the delivery is settled, exactly once.
func (d *record) maybeRelease() {
	if d.takeRelease() {
		d.sub.free(d)
	}
}

// takeRelease reports, exactly once, that the handler has returned and
// the delivery is settled: the caller then frees its slot. It reports
// false when the slot went on to the next delivery of d's key instead
// (keyLines.done).
func (d *record) takeRelease() bool {
	for {
		s := d.state.Load()
		if s&(stateFinished|stateHandlerDone) != stateFinished|stateHandlerDone || s&stateReleased != 0 {
			return false
		}
		if d.state.CompareAndSwap(s, s|stateReleased) {
			if k := d.sub.keys; k != nil && k.done(d) {
				d.sub.unsettled.Add(-1)
				return false
			}
			return true
		}
	}
}

// armLease starts the bus-side lease for a delivery whose handler
// returned unsettled (AckManual): when it runs out the slot is freed and
// the backend redelivers. It reports false when the subscription has
// given up its manual deliveries (Close ran out of time); the caller
// expires d.
func (d *record) armLease() bool {
	s := d.sub
	s.mu.Lock()
	defer s.mu.Unlock()
	// Store ext, then read the outcome (see onSettle).
	x := d.extLocked()
	if d.outcome() != OutcomePending {
		return true
	}
	if x.leaseEnd == 0 {
		x.leaseEnd = d.received + int64(s.cfg.AckTimeout)
	}
	return s.manual.addLocked(d, x, x.leaseEnd)
}

func (d *record) expire() {
	if !d.claim() {
		return
	}
	s := d.sub
	s.report(d, observer.ScopeLease, fmt.Errorf("lease of %v expired unsettled; the message will be redelivered", s.cfg.AckTimeout))
	d.finish(OutcomeLeaseLost, nil)
}

// message is the SPI message of d, for dead-letter copies.
func (d *record) message() backend.Message {
	p := &d.pub
	return backend.Message{ID: p.ID, Key: p.Key, Headers: p.Headers, Payload: p.Payload, Attempt: int(d.attempt), PublishedAt: p.PublishedAt}
}

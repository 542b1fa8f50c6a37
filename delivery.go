package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// Outcome is how a delivery was settled.
type Outcome int

const (
	// OutcomePending: not settled yet.
	OutcomePending Outcome = iota
	// OutcomeAcked: acked; it will not be delivered to the group again.
	OutcomeAcked
	// OutcomeNacked: handed back for redelivery (after a delay).
	OutcomeNacked
	// OutcomeDeadLettered: moved to the dead-letter topic.
	OutcomeDeadLettered
	// OutcomeDropped: rejected with dead-lettering off; acked and dropped.
	OutcomeDropped
	// OutcomeExpired: the lease ran out before it was settled (AckManual);
	// the backend redelivers it.
	OutcomeExpired
)

var outcomeNames = [...]string{"pending", "ack", "nack", "dead_letter", "dropped", "expired"}

// String returns "ack", "nack", "dead_letter", "dropped", "expired" or
// "pending".
func (o Outcome) String() string {
	if o >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Delivery is one received message plus its settlement methods. The
// settlement methods are safe for concurrent use; the first settlement
// wins and later ones return an error wrapping ErrAlreadySettled. A
// handler must not keep the Delivery after it is settled, except to read
// its fields.
type Delivery struct {
	Message
	// Topic the message was published to.
	Topic string
	// Group that received it.
	Group string
	// Attempt is 1 on the first delivery to the group.
	Attempt int
	// PublishedAt is when the bus accepted the message.
	PublishedAt time.Time

	// The fields below are kept few and small: a Delivery is allocated
	// per message, and the garbage collector pays for every byte.

	sub   *Subscription
	ackID backend.AckID
	// received is when the delivery's batch came from the backend, the
	// start of its lease, on the monoNow clock.
	received int64
	// ctx is the handler's ctx once made (see handlerCtx).
	ctx atomic.Pointer[cancelCause]
	ext *deliveryExt // allocated only when hooks or a lease are used; guarded by mu

	mu sync.Mutex // guards outcome, ext and the making of ctx

	// state holds the stateSettled ... stateCtxEnded bits.
	state   atomic.Uint32
	outcome uint8 // an Outcome
}

// deliveryExt holds the state few deliveries need, so the common one
// stays small.
type deliveryExt struct {
	dlqCode backend.DeadLetterCode // why it was dead-lettered or dropped
	hooks   []func(Outcome, error)
	// leaseEnd is when the lease ends (monoNow clock), once Extend moved
	// it or a manual delivery was queued; 0: received plus the ack timeout.
	leaseEnd int64
	// leaseIdx is 1 + the index in the subscription's manualLeases, 0
	// when not queued; guarded by manualLeases.mu.
	leaseIdx int

	// kept is what the lease keeper knows of a running handler whose
	// lease it had to act on; guarded by leaseKeeper.mu.
	kept keptLease
}

// extLocked returns d.ext, allocating it; d.mu must be held.
func (d *Delivery) extLocked() *deliveryExt {
	if d.ext == nil {
		d.ext = &deliveryExt{}
	}
	return d.ext
}

const (
	stateSettled  uint32 = 1 << iota // a settlement has claimed the delivery
	stateFinished                    // the settlement has completed
	stateHandlerDone
	stateReleased
	stateCtxEnded  // the handler returned: its ctx is cancelled
	stateInHandler // the handler runs now
)

// Ack settles the delivery as done. Acks are batched; a failed flush is
// reported to the observer and the message is redelivered after its lease.
func (d *Delivery) Ack(ctx context.Context) error {
	if d.sub == nil {
		return detached("ack")
	}
	if !d.claim() {
		return d.alreadySettled("ack")
	}
	return d.doAck()
}

// Nack hands the delivery back for redelivery after delay (0 = at once),
// with Attempt+1.
func (d *Delivery) Nack(ctx context.Context, delay time.Duration) error {
	if d.sub == nil {
		return detached("nack")
	}
	if delay < 0 {
		return fmt.Errorf("bus: nack: %w: negative delay %v", ErrInvalidOption, delay)
	}
	if !d.sub.caps.Redelivery {
		return fmt.Errorf("bus: nack: %w: %s does not redeliver", ErrUnsupported, d.sub.caps.Name)
	}
	if !d.claim() {
		return d.alreadySettled("nack")
	}
	return d.doNack(ctx, delay)
}

// Reject settles the delivery as failed for good: it goes to the
// dead-letter topic (with reason in its headers) and is never retried. With
// dead-lettering off it is acked, dropped and reported to the observer.
func (d *Delivery) Reject(ctx context.Context, reason error) error {
	if d.sub == nil {
		return detached("reject")
	}
	if reason == nil {
		reason = errors.New("rejected")
	}
	if !d.claim() {
		return d.alreadySettled("reject")
	}
	return d.doDeadLetter(ctx, withCode(backend.CodeRejected, reason))
}

// Extend restarts the lease of an unsettled delivery, for handlers that
// run longer than the ack timeout. It returns an error wrapping
// ErrUnsupported when the backend cannot extend leases.
func (d *Delivery) Extend(ctx context.Context) error {
	if d.sub == nil {
		return detached("extend")
	}
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
func (d *Delivery) extendLease(ctx context.Context) error {
	ext, ok := d.sub.bsub.(backend.Extender)
	if !ok {
		return fmt.Errorf("bus: extend: %w: %s cannot extend leases", ErrUnsupported, d.sub.caps.Name)
	}
	start := monoNow()
	if err := ext.Extend(ctx, d.ackID); err != nil {
		return fmt.Errorf("bus: extend %q: %w", d.ID, err)
	}
	d.mu.Lock()
	x := d.extLocked()
	x.leaseEnd = max(x.leaseEnd, start+int64(d.sub.opts.ackTimeout))
	if d.sub.opts.ackMode == AckManual {
		d.sub.manual.move(x, x.leaseEnd)
	}
	d.mu.Unlock()
	return nil
}

// OnSettle registers fn to be called once, with the outcome and the error
// of the settlement, when the delivery is settled (or its lease expires).
// If it is already settled fn is called at once. Middleware uses it to end
// spans and count outcomes.
func (d *Delivery) OnSettle(fn func(Outcome, error)) {
	d.mu.Lock()
	if o := Outcome(d.outcome); o != OutcomePending {
		d.mu.Unlock()
		fn(o, nil)
		return
	}
	x := d.extLocked()
	x.hooks = append(x.hooks, fn)
	d.mu.Unlock()
}

// Outcome returns how the delivery was settled so far.
func (d *Delivery) Outcome() Outcome {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Outcome(d.outcome)
}

// DeadLetterCode is the reason code of a delivery that was dead-lettered
// (or dropped with dead-lettering off), and "" otherwise. Middleware reads
// it in an OnSettle hook, for example to label metrics.
func (d *Delivery) DeadLetterCode() backend.DeadLetterCode {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ext == nil {
		return ""
	}
	return d.ext.dlqCode
}

func (d *Delivery) setDeadLetterCode(c backend.DeadLetterCode) {
	d.mu.Lock()
	d.extLocked().dlqCode = c
	d.mu.Unlock()
}

// detached is the error of a settlement on a zero Delivery.
func detached(op string) error {
	return fmt.Errorf("bus: %s: %w (use bustest.NewDelivery to test a handler)", op, ErrDetached)
}

// claim takes the right to settle. It fails if another settlement won.
func (d *Delivery) claim() bool {
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

func (d *Delivery) alreadySettled(op string) error {
	return fmt.Errorf("bus: %s %q: %w (%s)", op, d.ID, ErrAlreadySettled, d.Outcome())
}

func (d *Delivery) doAck() error {
	err := d.sub.acks.add(d.ackID)
	if err != nil {
		err = d.ackErr(err)
	}
	d.finish(OutcomeAcked, err)
	return err
}

// ackErr is the error of an ack of d the acker refused.
func (d *Delivery) ackErr(err error) error {
	return fmt.Errorf("bus: ack %q: %w", d.ID, err)
}

func (d *Delivery) doNack(ctx context.Context, delay time.Duration) error {
	err := d.sub.bsub.Nack(ctx, d.ackID, delay)
	if err != nil {
		err = fmt.Errorf("bus: nack %q: %w", d.ID, err)
	}
	d.finish(OutcomeNacked, err)
	return err
}

// doDeadLetter moves the message to the dead-letter topic, or drops it
// when dead-lettering is off.
func (d *Delivery) doDeadLetter(ctx context.Context, reason error) error {
	s := d.sub
	topic := s.opts.deadLetter
	code := reasonCode(reason)
	if topic == "" {
		d.setDeadLetterCode(code)
		err := s.acks.add(d.ackID)
		s.reportDeadLetter(d, code, fmt.Errorf("dropped, dead-lettering is off: %w", reason))
		d.finish(OutcomeDropped, err)
		return err
	}
	cp := d.deadLetterCopy(reason)
	d.setDeadLetterCode(code)
	var err error
	if dl, ok := s.bsub.(backend.DeadLetterer); ok {
		err = dl.DeadLetter(ctx, d.ackID, topic, cp)
	} else if err = s.bus.be.Publish(ctx, topic, []*backend.Message{cp}); err == nil {
		err = s.acks.add(d.ackID)
	}
	if err != nil {
		err = fmt.Errorf("bus: dead-letter %q to %q: %w", d.ID, topic, err)
	} else {
		s.reportDeadLetter(d, code, fmt.Errorf("moved to %q: %w", topic, reason))
	}
	d.finish(OutcomeDeadLettered, err)
	return err
}

func (d *Delivery) deadLetterCopy(reason error) *backend.Message {
	m := backend.Message{ID: d.ID, Key: d.Key, Headers: d.Headers, Payload: d.Payload}
	return backend.NewDeadLetter(&m, backend.DeadLetterInfo{
		Topic: d.Topic, Group: d.Group, Attempt: d.Attempt, Code: reasonCode(reason), Reason: reason.Error(),
	})
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
// withCode, else permanent for a Permanent error, else max-deliveries (the
// bus gave up redelivering).
func reasonCode(reason error) backend.DeadLetterCode {
	var c *codedReason
	switch {
	case errors.As(reason, &c):
		return c.code
	case IsPermanent(reason):
		return backend.CodePermanent
	default:
		return backend.CodeMaxDeliveries
	}
}

// finish records the outcome, runs the hooks and frees the slot if the
// handler is done too.
func (d *Delivery) finish(o Outcome, err error) {
	d.mu.Lock()
	d.outcome = uint8(o)
	var hooks []func(Outcome, error)
	if x := d.ext; x != nil {
		hooks, x.hooks = x.hooks, nil
		if d.sub.opts.ackMode == AckManual {
			d.sub.manual.remove(x)
		}
	}
	d.mu.Unlock()
	for _, h := range hooks {
		h(o, err)
	}
	d.state.Or(stateFinished)
	d.maybeRelease()
}

// handlerDone marks the handler as returned. It reports whether the
// delivery is settled too: its slot is then the caller's to give back
// (Subscription.releaseDone), which a dispatcher worker does in batches.
func (d *Delivery) handlerDone() bool {
	d.state.Or(stateHandlerDone)
	return d.takeRelease()
}

// maybeRelease frees the in-flight slot once the handler has returned and
// the delivery is settled, exactly once.
func (d *Delivery) maybeRelease() {
	if d.takeRelease() {
		d.sub.releaseDone(1)
	}
}

// takeRelease reports, exactly once, that the handler has returned and
// the delivery is settled: the caller then frees its slot.
func (d *Delivery) takeRelease() bool {
	for {
		s := d.state.Load()
		if s&(stateFinished|stateHandlerDone) != stateFinished|stateHandlerDone || s&stateReleased != 0 {
			return false
		}
		if d.state.CompareAndSwap(s, s|stateReleased) {
			return true
		}
	}
}

// armLease starts the bus-side lease for a delivery whose handler returned
// unsettled (AckManual): when it runs out the slot is freed and the
// backend redelivers. It reports false when the subscription has given up
// its manual deliveries (Close ran out of time); the caller expires d.
func (d *Delivery) armLease() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if Outcome(d.outcome) != OutcomePending {
		return true
	}
	x := d.extLocked()
	if x.leaseEnd == 0 {
		x.leaseEnd = d.received + int64(d.sub.opts.ackTimeout)
	}
	return d.sub.manual.add(d, x, x.leaseEnd)
}

func (d *Delivery) expire() {
	if !d.claim() {
		return
	}
	d.sub.report(d, observer.ScopeLease, fmt.Errorf("lease of %v expired unsettled; the message will be redelivered", d.sub.opts.ackTimeout))
	d.finish(OutcomeExpired, nil)
}

package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/observer"
)

// snoozeWindow bounds snoozing: a snooze is free (it does not count an
// attempt) while the message's next delivery comes at most snoozeWindow
// after the message was published. Past it a snooze counts like a nack,
// and the observer is told, so that a message snoozed again and again
// reaches its max deliveries and the dead-letter topic instead of
// circling unnoticed.
const snoozeWindow = 24 * time.Hour

// snooze is Delivery.Snooze.
func (d *record) snooze(ctx context.Context, delay time.Duration) error {
	if err := d.claimRedelivery("snooze", delay); err != nil {
		return err
	}
	return d.sub.snooze(ctx, d, delay)
}

// snooze settles a claimed delivery by snoozing it for delay: past its
// expiry it is dead-lettered, past snoozeWindow it counts as an attempt.
func (s *consumer) snooze(ctx context.Context, d *record, delay time.Duration) error {
	delay = capDelay(delay)
	due := time.Now().Add(delay)
	if exp, ok := s.expiry(d); ok && !due.Before(exp) {
		return d.doDeadLetter(ctx, withCode(backend.CodeExpired, fmt.Errorf("snoozed for %v, past its expiry at %s", delay, exp.UTC().Format(time.RFC3339Nano))))
	}
	s.emitDelay(d, lifecycle.Snoozed, delay)
	counted := false
	if pub := d.pub.PublishedAt; pub.IsZero() || due.Sub(pub) > snoozeWindow {
		counted = true
		s.report(d, observer.ScopeNack, fmt.Errorf("bus: snooze %q: its next delivery would come more than %v after it was published: the snooze counts as an attempt", d.pub.ID, snoozeWindow))
	}
	if s.keys != nil && s.keys.retry(d, delay, counted) {
		return nil
	}
	if counted {
		return d.doNack(ctx, delay)
	}
	return s.giveBackUncounted(ctx, d, delay)
}

// early holds d back when it came before its DeliverAt (a backend
// without Capabilities.Scheduling, or clocks apart) and reports whether
// the handler must not run it now. A delivery due within earlyHold waits
// here, in its slot and under its lease, and then runs (unless the
// subscription starts closing meanwhile: it goes back); one due later is
// given back to the group, without counting an attempt where the backend
// can (Snoozer), to come back returnLead before it is due and wait the
// rest here: a broker's redelivery timer is coarser than the promise of
// DeliverAt.
func (s *consumer) early(d *record) bool {
	at := d.pub.DeliverAt
	if at.IsZero() || !s.cfg.Caps.Redelivery {
		return false
	}
	wait := time.Until(at)
	if wait <= 0 {
		return false
	}
	hold := min(earlyHold, s.cfg.AckTimeout/3)
	if d.state.Load()&stateSettled != 0 {
		// Acked already (AckOnReceive with key ordering acks on
		// admission): it can only wait here.
		hold = wait
	}
	if wait <= hold && s.sleep(wait) {
		return false
	}
	if d.claim() {
		ctx, cancel := s.settleCtx()
		if s.fetchCtx.Err() != nil {
			// Closing: back to the group at once, as a shutdown gives
			// back what it did not handle, not held into the drain.
			s.release(ctx, d)
		} else {
			// Given back, not held in its key's line: with key ordering
			// the message takes its place in its key's order when it is
			// due, so it must not hold the key back until then.
			s.settleErr(d, observer.ScopeNack, s.giveBackUncounted(ctx, d, capDelay(max(wait-min(returnLead, hold), 0))))
		}
		cancel()
	}
	(*handlerCtx)(d).end()
	return true
}

// sleep waits for d, and reports false when the subscription starts
// closing first.
func (s *consumer) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.fetchCtx.Done():
		return false
	}
}

// earlyHold is how long before its DeliverAt an early delivery waits in
// its member rather than going back to the group. Holding costs nothing
// but the slot: while a member's slots hold early deliveries it fetches
// no more, so on a stream in DeliverAt order the stream itself keeps the
// later ones, and the member fetches each shortly before it is due.
const earlyHold = 500 * time.Millisecond

// returnLead is how long before its DeliverAt a delivery given back
// comes back. It covers the broker's redelivery timer, which runs late
// by a few milliseconds, tens under load (JetStream); no more, because a
// delivery that comes back earlier holds its slot longer, and deliveries
// given back together come back together: held for most of earlyHold,
// they would fill the slots that the deliveries due before them need.
const returnLead = 100 * time.Millisecond

// giveBackUncounted gives a claimed delivery back to the group after
// delay through backend.Snoozer, or with a nack (which counts) when the
// backend cannot leave it uncounted.
func (s *consumer) giveBackUncounted(ctx context.Context, d *record, delay time.Duration) error {
	if sn, ok := s.bsub.(backend.Snoozer); ok {
		err := d.beforeGiveBack(ctx)
		if err == nil {
			err = sn.Snooze(ctx, d.ackID, delay)
		}
		if !errors.Is(err, backend.ErrSnoozeLimit) {
			if err != nil {
				err = fmt.Errorf("bus: snooze %q: %w", d.pub.ID, err)
			}
			d.finish(OutcomeNacked, err)
			return err
		}
		s.report(d, observer.ScopeNack, fmt.Errorf("bus: snooze %q: the snooze counts as an attempt: %w", d.pub.ID, err))
	}
	return d.doNack(ctx, delay)
}

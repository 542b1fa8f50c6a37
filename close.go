package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/shutdown"
	"github.com/eventbus-go/bus/observer"
)

// Close stops the subscription (see Subscription.Close
// for the contract): it stops fetching, lets handlers finish until the
// ctx of any Close ends, then cancels them with cause ErrClosing, flushes
// settlements and returns by its ctx plus a short grace.
func (s *consumer) Close(ctx context.Context) error { return s.close(ctx, false) }

// close is Close; background says that no caller waits for the result of
// this call (closeInBackground), so the shutdown's error stays for a
// Close that waits for it.
func (s *consumer) close(ctx context.Context, background bool) error {
	// Any Close whose ctx ends forces the shutdown under way.
	stop := context.AfterFunc(ctx, func() { s.Force(context.Cause(ctx)) })
	defer stop()
	if s.startClose() {
		return s.shutdown(!background)
	}
	hard, cancel := shutdown.WithGrace(ctx)
	defer cancel()
	if !shutdown.WaitOrDone(hard, s.done) {
		return fmt.Errorf("bus: close subscription %q: %d handler(s) still running: %w", s.cfg.Topic, s.disp.inHandler(), ctx.Err())
	}
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.shutdownDone && !s.errTaken {
		// The shutdown's error goes to one caller: the first Close, or
		// else the first that waits for it (the background close then
		// reports nothing).
		s.errTaken = true
		return s.closeErr
	}
	return nil
}

// Force makes the shutdown stop waiting for the running handlers (at
// once if it has not started yet): their ctx is cancelled with cause
// ErrClosing.
func (s *consumer) Force(cause error) { s.forceStop(cause) }

// startClose reports whether the caller is the first to close s: it then
// runs the shutdown. A later caller is counted as waiting for its result.
func (s *consumer) startClose() bool {
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
func (s *consumer) errToReport() bool {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.waiting {
		return false
	}
	s.errTaken = true
	return true
}

// shutdown runs the steps of Close once, bounded by s.force (the ctx of
// every Close) plus the grace; taken says that its caller returns the
// error, so no later Close does.
func (s *consumer) shutdown(taken bool) error {
	hard, cancel := shutdown.WithGrace(s.force)
	defer cancel()
	s.stopAfter()
	s.stopFetch()
	if s.keys != nil {
		if s.owner != nil {
			// One member of the group consumes at a time: finishing what
			// it fetched lets the next start as soon as nothing of the
			// group is unsettled, instead of an ack timeout later.
			s.keys.mu.Lock()
			s.keys.drain = true
			s.keys.mu.Unlock()
		}
		// Before the dispatcher stops: no key pushes after this.
		s.keys.close(hard)
	}
	drained := make(chan struct{})
	go func() {
		<-s.fetchDone // no delivery is pushed after the fetch loop ends
		s.disp.stop()
		close(drained)
	}()
	cancelled := s.waitHandlers(drained)
	errs := s.collect(hard, drained, cancelled)
	if !shutdown.WaitOrDone(hard, drained) {
		s.outlived.Store(true)
	}
	s.cancelHandler(ErrClosing)
	s.dropLeases(hard)
	if s.keeper != nil {
		s.keeper.close()
	}
	// Handlers that outlived the shutdown, or a fetch still under way,
	// leave their deliveries to their leases.
	clean := !s.outlived.Load()
	if s.notBack.Load() {
		// A delivery could not be given back: it comes back after its
		// lease, and so do the deliveries of its key after it.
		clean = false
	}
	if s.keys != nil && s.keys.leftHeld() {
		// A key waited for a delivery that the member before this one
		// left unsettled: it comes back after its lease, and the next
		// member has to hold the key back until then, which only a
		// takeover does (a released lock says nothing is left).
		clean = false
	}
	if err := s.acks.close(hard); err != nil {
		errs = append(errs, err)
		clean = false
	}
	// The backend's subscription closes before the group lock passes:
	// what it still holds (a fetch that the close cut short) is back with
	// the group before the next member fetches.
	if err := shutdown.CloseBounded(hard, s.bsub.Close); err != nil {
		errs = append(errs, fmt.Errorf("backend close: %w", err))
		clean = false
	}
	if s.owner != nil {
		// Drained, flushed and closed: the next member may take over,
		// and waits for what is left when this one could not settle or
		// give back everything.
		s.owner.close(hard, clean)
	}
	if s.bcast != nil {
		// Nothing of the group is in use any more.
		if err := s.bcast.close(hard); err != nil {
			errs = append(errs, err)
		}
	}
	s.trimSettled(hard)
	s.ended()
	var err error
	if len(errs) > 0 {
		err = fmt.Errorf("bus: close subscription %q: %w", s.cfg.Topic, errors.Join(errs...))
	}
	s.cfg.Logger.LogAttrs(context.Background(), slog.LevelDebug, "bus: subscription closed",
		slog.String("topic", s.cfg.Topic), slog.String("group", s.cfg.Group), slog.Bool("clean", err == nil))
	// Set before Done closes: a Close that waits for Done then finds it.
	s.closeMu.Lock()
	s.closeErr, s.shutdownDone = err, true
	s.errTaken = s.errTaken || taken
	s.closeMu.Unlock()
	s.finishClose(hard, drained)
	return err
}

// closeTrimTimeout bounds the trim a clean Close runs (trimSettled).
const closeTrimTimeout = time.Second

// trimSettled has the backend remove what every group of the topic
// settled, once a shutdown that was not forced has flushed the
// settlements, within closeTrimTimeout and hard. A failure goes to the
// observer: the next trim of any publisher or subscriber removes it.
func (s *consumer) trimSettled(hard context.Context) {
	t, ok := s.bus.be.(backend.SettledTrimmer)
	if !ok || s.force.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(hard, closeTrimTimeout)
	defer cancel()
	if err := t.TrimSettled(ctx, s.cfg.Topic); err != nil {
		s.cfg.Observer.Observe(context.Background(), observer.Event{Scope: observer.ScopeShutdown, Topic: s.cfg.Topic, Group: s.cfg.Group,
			Err: fmt.Errorf("bus: close subscription %q: trim what every group settled: %w", s.cfg.Topic, err)})
	}
}

// waitHandlers lets the running handlers finish until the shutdown is
// forced, then cancels them (cause ErrClosing); it returns how many it
// cancelled. Manual deliveries whose handler returned unsettled keep their
// lease; they are waited for until the shutdown is forced, then given back
// (dropLeases).
func (s *consumer) waitHandlers(drained <-chan struct{}) int64 {
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
func (s *consumer) collect(hard context.Context, drained <-chan struct{}, cancelled int64) []error {
	var errs []error
	cause := context.Cause(s.force)
	clean := shutdown.WaitOrDone(hard, drained)
	if !shutdown.WaitOrDone(hard, s.fetchDone) {
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

// dropLeases gives up the deliveries still waiting for a manual
// settlement when Close runs out of time, or when it ends: their slots are
// freed, and they are released to the group (without counting an attempt)
// while hard lasts, or else redelivered when their lease ends there.
func (s *consumer) dropLeases(hard context.Context) {
	for _, d := range s.manual.drain() {
		if !d.claim() {
			continue
		}
		if hard.Err() != nil {
			d.finish(OutcomeLeaseLost, ErrClosed)
			continue
		}
		s.release(hard, d)
	}
}

// finishClose closes Done once the last handler and the subscription's
// own goroutines have returned: now, or in the background after
// stragglers that ignore their ctx.
func (s *consumer) finishClose(hard context.Context, drained <-chan struct{}) {
	finished := make(chan struct{})
	go func() {
		<-drained
		s.workers.Wait()
		close(finished)
	}()
	if shutdown.WaitOrDone(hard, finished) {
		s.reportLate()
		close(s.done)
	} else {
		go func() {
			<-finished
			s.reportLate()
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
func (s *consumer) closeInBackground() {
	ctx, cancel := context.WithTimeout(context.Background(), backgroundCloseTimeout)
	defer cancel()
	if err := s.close(ctx, true); err != nil && s.errToReport() {
		s.observe(observer.Event{Scope: observer.ScopeShutdown, Topic: s.cfg.Topic, Group: s.cfg.Group, Err: err})
	}
}

// fail ends the subscription because the backend failed for good.
func (s *consumer) fail(err error) {
	s.closeMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.closeMu.Unlock()
	s.stopFetch()
	s.goCloseInBackground()
}

// goCloseInBackground runs closeInBackground on a goroutine the bus's
// Close waits for; once the bus is closing it does nothing (the bus's
// Close closes the consumer itself).
func (s *consumer) goCloseInBackground() {
	b := s.bus
	if !b.ops.enter() {
		return
	}
	go func() {
		defer b.ops.leave()
		s.closeInBackground()
	}()
}

// ended tells the bus that the consumer's shutdown is done: its events
// sink is released, and an unpartitioned subscription's autoscale
// controller stopped and the subscription forgotten (a partitioned one's
// manager does both).
func (s *consumer) ended() {
	if s.sub != nil {
		if s.cfg.Autoscale != nil {
			s.cfg.Autoscale.Stop()
		}
		s.bus.forget(s.sub)
	}
	if s.cfg.Event != nil {
		s.cfg.Event.Release()
	}
}

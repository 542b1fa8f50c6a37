package conformance

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// The cases of this file check that Close is bounded by its ctx on every
// path (after the Subscribe ctx ended, after a backend failure, called
// twice or concurrently) and that a shutdown is not a failure.

// closeSlack is how long past its ctx a Close may return: the bus's grace
// (50 ms) plus scheduling noise on a loaded machine (a 2-core machine
// running several test processes can delay a goroutine by hundreds of
// milliseconds), scaled like every duration of the suite
// (WithTimeScale: a backend that answers several times slower also
// schedules its goroutines several times later). A Close that waited
// for its handlers or their leases would take seconds more.
const closeSlack = 500 * time.Millisecond

// stuckHandler is a handler that runs until its ctx ends (or the case's
// deadline) and records the cause of the cancellation; started gets a value
// per call.
type stuckHandler struct {
	started chan *bus.Delivery
	cause   atomic.Pointer[error]
	calls   atomic.Int64
}

func newStuckHandler() *stuckHandler {
	return &stuckHandler{started: make(chan *bus.Delivery, 16)}
}

func (sh *stuckHandler) handle(s *suite) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) error {
		sh.calls.Add(1)
		trySend(sh.started, d)
		select {
		case <-ctx.Done():
			cause := context.Cause(ctx)
			sh.cause.Store(&cause)
			return ctx.Err()
		case <-time.After(s.deadline()):
			return nil
		}
	}
}

func (sh *stuckHandler) lastCause() error {
	if p := sh.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// requireClosesWithin runs close with a ctx of d and checks that it
// returns by the ctx's deadline plus the suite's closeSlack.
func requireClosesWithin(t *testing.T, s *suite, d time.Duration, what string, close func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	begin := time.Now()
	err := close(ctx)
	elapsed := time.Since(begin)
	assert.LessOrEqual(t, elapsed, d+s.cfg.dur(closeSlack), "%s returned %v after a %v ctx: Close must be bounded by its ctx", what, elapsed, d)
	return err
}

// testCloseAfterSubscribeCtxEnded: the Ctrl-C pattern. The Subscribe ctx
// ends (its background shutdown waits for the handlers), then the
// application's own Close with a short ctx returns by that ctx, having
// cancelled the handler with cause ErrClosing.
func testCloseAfterSubscribeCtxEnded(t *testing.T, s *suite) {
	for _, viaBus := range []bool{false, true} {
		name := "Subscription.Close"
		if viaBus {
			name = "Bus.Close"
		}
		t.Run(name, func(t *testing.T) {
			h := s.newHarness(t)
			topic := h.topic("ctrlc")
			sh := newStuckHandler()
			subCtx, cancelSub := context.WithCancel(context.Background())
			defer cancelSub()
			sub := h.subscribe(subCtx, topic, sh.handle(s), bus.WithGroup(h.group("ctrlc")), bus.WithAckTimeout(s.longLease()))
			h.publish(topic, &bus.Message{Payload: []byte("slow")})
			recv(t, s, sh.started, "the slow handler to start")
			cancelSub()
			closeFn := sub.Close
			if viaBus {
				closeFn = h.bus.Close
			}
			_ = requireClosesWithin(t, s, s.cfg.dur(300*time.Millisecond), name+" after the Subscribe ctx ended", closeFn)
			recv(t, s, sub.Done(), "Done once the cancelled handler returned")
			assert.ErrorIs(t, sh.lastCause(), bus.ErrClosing, "the handler's ctx is cancelled with cause ErrClosing")
		})
	}
}

// testConcurrentClosesBounded: two Closes at once, and a third after them,
// each return by their own ctx, while a handler runs until cancelled.
func testConcurrentClosesBounded(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("closes")
	sh := newStuckHandler()
	sub := h.subscribe(context.Background(), topic, sh.handle(s), bus.WithGroup(h.group("closes")), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, &bus.Message{Payload: []byte("slow")})
	recv(t, s, sh.started, "the slow handler to start")
	long := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
		defer cancel()
		long <- sub.Close(ctx)
	}()
	short := s.cfg.dur(200 * time.Millisecond)
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- requireClosesWithin(t, s, short, "a concurrent Close", sub.Close) }()
	}
	for range 2 {
		recv(t, s, errs, "a concurrent Close to return")
	}
	recv(t, s, long, "the first Close to return once a shorter Close forced the shutdown")
	recv(t, s, sub.Done(), "Done after the shutdown")
	assert.ErrorIs(t, sh.lastCause(), bus.ErrClosing, "the handler's ctx is cancelled with cause ErrClosing")
	require.NoError(t, requireClosesWithin(t, s, short, "a Close after the shutdown", sub.Close), "a Close after the shutdown finished returns nil")
}

// failingBackend makes the Receive of its subscriptions fail for good once
// fail is set, as a backend that lost its server for good does.
type failingBackend struct {
	backend.Backend
	fail atomic.Bool
}

func (f *failingBackend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := f.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	return &failingSub{Subscription: sub, fail: &f.fail}, nil
}

type failingSub struct {
	backend.Subscription
	fail *atomic.Bool
}

var errInjected = errors.New("injected failure")

func (f *failingSub) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	if f.fail.Load() {
		return nil, backend.Permanent(errInjected)
	}
	return f.Subscription.Receive(ctx, max)
}

// testCloseAfterBackendFailure: the backend fails for good while a handler
// runs; the subscription's background shutdown waits for the handler, and
// the application's Close is still bounded by its own ctx.
func testCloseAfterBackendFailure(t *testing.T, s *suite) {
	fb := &failingBackend{Backend: s.newBackend(t)}
	events := &eventLog{}
	b := bus.New(fb, bus.WithObserver(events))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
		defer cancel()
		_ = b.Close(ctx)
	})
	h := &harness{t: t, s: s, be: &countingBackend{Backend: fb}, bus: b, events: events}
	topic := h.topic("fail")
	sh := newStuckHandler()
	sub := h.subscribe(context.Background(), topic, sh.handle(s), bus.WithGroup(h.group("fail")), bus.WithAckTimeout(s.longLease()))
	require.NoError(t, b.Publish(context.Background(), topic, &bus.Message{Payload: []byte("slow")}), "publish")
	recv(t, s, sh.started, "the slow handler to start")
	fb.fail.Store(true)
	s.eventually(t, func() bool { return sub.Err() != nil }, "the subscription ends with the backend's failure")
	require.ErrorIs(t, sub.Err(), errInjected, "Err says why the subscription ended")
	_ = requireClosesWithin(t, s, s.cfg.dur(300*time.Millisecond), "Close after a backend failure", sub.Close)
	recv(t, s, sub.Done(), "Done once the cancelled handler returned")
	assert.ErrorIs(t, sh.lastCause(), bus.ErrClosing, "the handler's ctx is cancelled with cause ErrClosing")
}

// testShutdownsDoNotBurnAttempts: three shutdowns in a row during one slow
// handler, each with the handler cancelled, then a normal run acks the
// message: it is not dead-lettered for max deliveries, every delivery has
// Attempt 1, and no shutdown is reported as a handler error.
func testShutdownsDoNotBurnAttempts(t *testing.T, s *suite) {
	h := s.newHarness(t)
	if !h.releases() {
		t.Skipf("%s subscriptions do not implement backend.Releaser: a shutdown counts as an attempt there", s.caps.Name)
	}
	topic, group := h.topic("deploys"), h.group("deploys")
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithAckTimeout(s.longLease()), bus.WithMaxDeliveries(2), fastRetry()}
	m := &bus.Message{Payload: []byte("slow but healthy")}
	for deploy := 1; deploy <= 3; deploy++ {
		sh := newStuckHandler()
		sub := h.subscribe(context.Background(), topic, sh.handle(s), opts...)
		if deploy == 1 {
			h.publish(topic, m) // after the group exists: it starts from the newest
		}
		d := recv(t, s, sh.started, "the slow handler to start")
		assert.Equal(t, 1, d.Attempt, "deploy %d: a delivery after shutdowns keeps Attempt 1", deploy)
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(50*time.Millisecond))
		err := sub.Close(ctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "deploy %d: Close says it cancelled the handler", deploy)
		// Close returns by its ctx plus a grace, not when the cancelled
		// handler has run: on a loaded machine it may not have yet.
		s.eventually(t, func() bool { return sh.lastCause() != nil }, "deploy %d: the cancelled handler returns", deploy)
		assert.ErrorIs(t, sh.lastCause(), bus.ErrClosing, "deploy %d: the handler's ctx is cancelled with cause ErrClosing", deploy)
	}
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil), opts...)
	s.eventually(t, func() bool { return len(in.of(m.ID)) >= 1 }, "the message is handled after three shutdowns")
	assert.Equal(t, []int{1}, in.attempts(m.ID), "the shutdowns did not count as attempts")
	assert.Empty(t, h.events.scope(observer.ScopeDeadLetter), "no dead letter after shutdowns")
	assert.Empty(t, h.events.scope(observer.ScopeHandler), "a handler cancelled by a shutdown is not reported as failing")
}

// releases reports whether the backend's subscriptions implement
// backend.Releaser.
func (h *harness) releases() bool {
	return h.probe(func(sub backend.Subscription) bool { _, ok := sub.(backend.Releaser); return ok })
}

// snoozes reports whether the backend's subscriptions implement
// backend.Snoozer.
func (h *harness) snoozes() bool {
	return h.probe(func(sub backend.Subscription) bool { _, ok := sub.(backend.Snoozer); return ok })
}

// probe subscribes a member straight at the backend and reports what has
// says of it.
func (h *harness) probe(has func(backend.Subscription) bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), h.s.deadline())
	defer cancel()
	sub, err := h.be.Backend.Subscribe(ctx, h.topic("probe"), backend.SubscribeConfig{
		Group: h.group("probe"), AckTimeout: h.s.longLease(), MaxInFlight: 1, MaxDeliveries: 3, Observer: observer.Nop(),
	})
	require.NoError(h.t, err, "subscribe a probe to read the backend's optional interfaces")
	ok := has(sub)
	require.NoError(h.t, sub.Close(), "close the probe")
	return ok
}

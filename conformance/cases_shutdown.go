package conformance

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	bus "github.com/eventbus-go/bus"
)

// testCloseDrains: Subscription.Close waits for in-flight handlers (without
// cancelling them) and flushes their acks, so a new member of the group
// gets no redelivery.
func testCloseDrains(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("drain"), h.group("drain")
	lease := s.ackTimeout()
	const k = 5
	release := make(chan struct{})
	started := make(chan string, k)
	var finished, cancelled atomic.Int64
	in := &inbox{}
	sub := h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		trySend(started, d.ID)
		select {
		case <-release:
		case <-time.After(s.deadline()):
		}
		if ctx.Err() != nil {
			cancelled.Add(1)
		}
		finished.Add(1)
		return nil
	}), bus.WithGroup(group), bus.WithMaxInFlight(k), bus.WithAckTimeout(lease))

	h.publishN(topic, "m", k)
	for range k {
		recv(t, s, started, "an in-flight handler to start")
	}
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
		defer cancel()
		closed <- sub.Close(ctx)
	}()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (err %v) while %d handlers were still running", err, k)
	case <-time.After(s.cfg.dur(100 * time.Millisecond)):
	}
	close(release)
	require.NoError(t, recv(t, s, closed, "Close to return"), "a graceful Close")
	assert.Equal(t, int64(k), finished.Load(), "Close returns only after every in-flight handler finished")
	assert.Zero(t, cancelled.Load(), "handlers that finish within the close ctx are not cancelled")
	select {
	case <-sub.Done():
	default:
		t.Fatal("Done must be closed when Close returns")
	}

	again := &inbox{}
	h.subscribe(context.Background(), topic, again.handle(nil), bus.WithGroup(group), bus.WithAckTimeout(lease))
	marker := &bus.Message{Payload: []byte("after close")}
	h.publish(topic, marker)
	s.eventually(t, func() bool { return len(again.of(marker.ID)) >= 1 }, "the new member receives new messages")
	s.never(t, s.quiet(), func() bool { return again.len() > 1 },
		"Close flushed the acks of the drained messages: no redelivery to a new member of the group")
}

// testCloseCancelsHandlersWhenCtxEnds: when the close ctx ends first,
// Close cancels the handlers' ctx, reports the ctx error, and the
// unfinished message is not lost: a new member gets it again.
func testCloseCancelsHandlers(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("force"), h.group("force")
	started := make(chan struct{}, 4)
	var cancelled atomic.Int64
	sub := h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt > 1 {
			return nil
		}
		trySend(started, struct{}{})
		select {
		case <-ctx.Done():
			cancelled.Add(1)
			return ctx.Err()
		case <-time.After(s.deadline()):
			return nil
		}
	}, bus.WithGroup(group), bus.WithAckTimeout(s.ackTimeout()), fastRetry())

	m := &bus.Message{Payload: []byte("stuck")}
	h.publish(topic, m)
	recv(t, s, started, "the stuck handler to start")
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(100*time.Millisecond))
	defer cancel()
	begin := time.Now()
	err := sub.Close(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "Close reports that its ctx ended before the handlers finished")
	assert.Less(t, time.Since(begin), s.deadline()/2, "Close returns soon after its ctx ends")
	assert.Equal(t, int64(1), cancelled.Load(), "the running handler's ctx is cancelled")
	// Close returned at its ctx's deadline plus a grace; the handler has
	// returned, and what is left (giving the message back) is bounded.
	select {
	case <-sub.Done():
	case <-time.After(s.deadline() / 2):
		t.Fatal("Done must be closed soon after Close returns: the cancelled handler has returned")
	}
	if !s.caps.Redelivery {
		return
	}
	again := &inbox{}
	h.subscribe(context.Background(), topic, again.handle(nil), bus.WithGroup(group), bus.WithAckTimeout(s.ackTimeout()))
	s.eventually(t, func() bool { return len(again.of(m.ID)) >= 1 }, "the interrupted message is delivered to the next member")
	if h.releases() {
		assert.Equal(t, 1, again.of(m.ID)[0].Attempt, "a delivery the shutdown cancelled does not count as an attempt")
	} else {
		assert.Greater(t, again.of(m.ID)[0].Attempt, 1, "without a Releaser it comes back as a redelivery")
	}
}

// testResubscribeContinues: rejoining a group resumes where it stopped:
// messages published meanwhile arrive, acked ones do not come back.
func testResubscribeContinues(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("resub"), h.group("resub")
	n := count(40, 10)
	first := &inbox{}
	sub := h.subscribe(context.Background(), topic, first.handle(nil), bus.WithGroup(group), bus.WithAckTimeout(s.ackTimeout()))
	before := h.publishN(topic, "before", n)
	s.eventually(t, func() bool { return first.distinct() >= n }, "the first member handles the first %d", n)
	h.closeSub(sub)

	during := h.publishN(topic, "during", n)
	second := &inbox{}
	h.subscribe(context.Background(), topic, second.handle(nil), bus.WithGroup(group), bus.WithAckTimeout(s.ackTimeout()))
	s.eventually(t, func() bool { return second.distinct() >= n }, "the rejoined group gets the %d published while nobody listened", n)
	s.never(t, s.quiet(), func() bool { return second.len() > n }, "acked messages are not delivered again")
	requireExactlyOnce(t, first, before, "first member")
	requireExactlyOnce(t, second, during, "rejoined member")
}

// testPublishAfterClose: a closed bus refuses Publish and Subscribe with
// ErrClosed; its subscriptions are done; closing again is a no-op.
func testPublishAfterClose(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("closed")
	sub := h.subscribe(context.Background(), topic, func(context.Context, *bus.Delivery) error { return nil },
		bus.WithGroup(h.group("closed")))
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	require.NoError(t, h.bus.Close(ctx), "close the bus")

	err := h.bus.Publish(ctx, topic, &bus.Message{Payload: []byte("late")})
	require.ErrorIs(t, err, bus.ErrClosed, "Publish after Close")
	_, err = h.bus.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error { return nil })
	require.ErrorIs(t, err, bus.ErrClosed, "Subscribe after Close")
	select {
	case <-sub.Done():
	default:
		t.Fatal("closing the bus must finish its subscriptions")
	}
	require.NoError(t, h.bus.Close(ctx), "closing twice returns nil")
}

// testCancelSubscribeCtx: cancelling the ctx given to Subscribe stops that
// subscription cleanly; the bus keeps working.
func testCancelSubscribeCtx(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, other := h.topic("cancel"), h.topic("cancel-other")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in, otherIn := &inbox{}, &inbox{}
	sub := h.subscribe(ctx, topic, in.handle(nil), bus.WithGroup(h.group("cancel")), bus.WithAckTimeout(s.longLease()))
	h.subscribe(context.Background(), other, otherIn.handle(nil), bus.WithGroup(h.group("cancel")), bus.WithAckTimeout(s.longLease()))

	h.publish(topic, &bus.Message{Payload: []byte("before cancel")})
	s.eventually(t, func() bool { return in.len() >= 1 }, "the subscription works before the cancel")
	cancel()
	recv(t, s, sub.Done(), "Done after the subscribe ctx was cancelled")
	require.NoError(t, sub.Err(), "a cancelled subscription stops cleanly")

	h.publish(topic, &bus.Message{Payload: []byte("after cancel")})
	h.publish(other, &bus.Message{Payload: []byte("still alive")})
	s.eventually(t, func() bool { return otherIn.len() >= 1 }, "other subscriptions keep running")
	s.never(t, s.ackTimeout(), func() bool { return in.len() > 1 }, "a stopped subscription runs no handler")
}

// testNoGoroutineLeak: after Close nothing the bus or the backend's
// subscriptions started is left running. The snapshot is taken after the
// backend is made (its constructor may share servers or pools with the
// test) and before the bus exists.
func testNoGoroutineLeak(t *testing.T, s *suite) {
	be := s.newBackend(t)
	ignore := goleak.IgnoreCurrent()
	events := &eventLog{}
	b := bus.New(be, bus.WithObserver(events))
	t.Cleanup(func() { _ = b.Close(context.Background()) }) // when the case fails early
	h := &harness{t: t, s: s, be: &countingBackend{Backend: be}, bus: b, events: events}
	autoTopic, manualTopic := h.topic("leak-auto"), h.topic("leak-manual")

	auto, manual := &inbox{}, &inbox{}
	h.subscribe(context.Background(), autoTopic, auto.handle(nil), bus.WithGroup(h.group("auto")), bus.WithAckTimeout(s.ackTimeout()))
	h.subscribe(context.Background(), manualTopic, manual.handle(func(ctx context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "m-0" {
			return nil // left unsettled: its lease timer must not outlive Close
		}
		return d.Ack(ctx)
	}), bus.WithGroup(h.group("manual")), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(s.ackTimeout()))
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := h.subscribe(ctx, h.topic("leak-cancelled"), func(context.Context, *bus.Delivery) error { return nil },
		bus.WithGroup(h.group("cancelled")))
	cancel()
	recv(t, s, cancelled.Done(), "the cancelled subscription to stop")

	n := 10
	h.publishN(autoTopic, "m", n)
	h.publishN(manualTopic, "m", n)
	s.eventually(t, func() bool { return auto.distinct() >= n && manual.distinct() >= n }, "both subscriptions handle %d", n)

	closeCtx, closeCancel := context.WithTimeout(context.Background(), s.deadline())
	defer closeCancel()
	require.NoError(t, b.Close(closeCtx), "close the bus")
	goleak.VerifyNone(t, ignore)
}

package conformance

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// testLongHandlerRunsOnce: a handler that works three times its ack
// timeout without calling Extend runs exactly once per message, is never
// run concurrently with its own redelivery, and is not dead-lettered: the
// bus keeps its lease alive.
func testLongHandlerRunsOnce(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("longhandler"), h.group("longhandler")
	// A lease of twice the suite's short one leaves the keep-alive room
	// on a loaded machine; the handler works three leases.
	lease := 2 * s.ackTimeout()
	work := 3 * lease
	var running, overlap atomic.Int64
	in := &inbox{}
	done := make(chan string, 8)
	dlq := &inbox{}
	h.subscribe(context.Background(), topic+".dlq", dlq.handle(nil), bus.WithGroup(group))
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if running.Add(1) > 1 {
			overlap.Add(1)
		}
		defer running.Add(-1)
		select {
		case <-time.After(work):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		trySend(done, d.ID)
		return nil
	}), bus.WithGroup(group), bus.WithAckTimeout(lease), bus.WithMaxDeliveries(4), bus.WithMaxInFlight(1), fastRetry())

	m := &bus.Message{Payload: []byte("slow")}
	h.publish(topic, m)
	select {
	case <-done:
	case <-time.After(work + s.deadline()):
		t.Fatalf("the long handler did not finish within %v", work+s.deadline())
	}
	// A redelivery, if the lease had run out, would show up within a lease.
	s.never(t, 2*lease, func() bool { return in.len() > 1 || dlq.len() > 0 },
		"a handler working past its ack timeout must not be redelivered or dead-lettered")
	assert.Equal(t, []int{1}, in.attempts(m.ID), "the message ran exactly once")
	assert.Zero(t, overlap.Load(), "the handler never ran concurrently with its own redelivery")
	assert.Empty(t, h.events.scope(observer.ScopeLease), "the lease was never lost")
}

// noExtendBackend hides the optional interfaces of its subscriptions, as
// a backend that cannot extend leases would.
type noExtendBackend struct{ backend.Backend }

type plainSubscription struct{ backend.Subscription }

func (b noExtendBackend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := b.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	return plainSubscription{sub}, nil
}

// testLeaseLostCancelsBeforeRedelivery: over a backend that cannot extend
// leases, a handler that outlives its lease has its ctx cancelled with
// cause bus.ErrLeaseLost before the redelivery of its message starts.
func testLeaseLostCancelsBeforeRedelivery(t *testing.T, s *suite) {
	be := noExtendBackend{s.newBackend(t)}
	events := &eventLog{}
	b := bus.New(be, bus.WithObserver(events))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("close the bus: %v", err)
		}
	})
	topic, group := "conf.leaselost."+uniqueSuffix(), "g-leaselost-"+uniqueSuffix()
	type start struct {
		attempt int
		at      time.Time
	}
	var mu sync.Mutex
	var starts []start
	var cancelledAt time.Time
	var cause error
	second := make(chan struct{}, 1)
	_, err := b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		mu.Lock()
		starts = append(starts, start{d.Attempt, time.Now()})
		mu.Unlock()
		if d.Attempt > 1 {
			trySend(second, struct{}{})
			return nil
		}
		select {
		case <-ctx.Done():
			mu.Lock()
			cancelledAt, cause = time.Now(), context.Cause(ctx)
			mu.Unlock()
			return ctx.Err()
		case <-time.After(s.deadline()):
			return nil
		}
	}, bus.WithGroup(group), bus.WithAckTimeout(2*s.ackTimeout()), bus.WithMaxInFlight(2), fastRetry())
	require.NoError(t, err, "subscribe")
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{Payload: []byte("x")}), "publish")
	recv(t, s, second, "the redelivery after the lost lease")

	mu.Lock()
	defer mu.Unlock()
	require.ErrorIs(t, cause, bus.ErrLeaseLost, "the handler's ctx is cancelled with cause ErrLeaseLost")
	require.Len(t, starts, 2, "one first attempt and one redelivery")
	assert.True(t, cancelledAt.Before(starts[1].at), "the handler was cancelled (%v) before the redelivery started (%v)",
		cancelledAt.Format(time.StampMicro), starts[1].at.Format(time.StampMicro))
	assert.Len(t, events.scope(observer.ScopeLease), 1, "the lost lease is reported once")
}

// testCloseBoundedByCtx: Close returns within its ctx plus 100 ms even
// when a handler ignores its cancelled ctx, and says so in its error; the
// straggler's late ack is dropped and the message comes back.
func testCloseBoundedByCtx(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("closebound"), h.group("closebound")
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var returned sync.WaitGroup
	returned.Add(1)
	sub := h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt > 1 {
			return nil
		}
		defer returned.Done()
		trySend(started, struct{}{})
		<-release // ignores ctx on purpose
		return nil
	}, bus.WithGroup(group), bus.WithAckTimeout(s.longLease()))
	defer func() {
		close(release)
		returned.Wait()
	}()
	h.publish(topic, &bus.Message{Payload: []byte("stubborn")})
	recv(t, s, started, "the stubborn handler to start")

	const timeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	begin := time.Now()
	err := sub.Close(ctx)
	elapsed := time.Since(begin)
	require.Error(t, err, "Close reports the handler it could not wait for")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "1 handler(s) still running", "the error says how many handlers were still running")
	assert.LessOrEqual(t, elapsed, timeout+s.cfg.dur(closeSlack), "Close returned %v after a %v ctx", elapsed, timeout)

	// A second Close is bounded by its own ctx.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	begin = time.Now()
	err = sub.Close(ctx2)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the straggler still runs, so the second Close ends with its ctx")
	assert.LessOrEqual(t, time.Since(begin), 50*time.Millisecond+s.cfg.dur(closeSlack), "the second Close is bounded by its own ctx")
}

// testCancelStopsFetching: cancelling the Subscribe ctx stops fetching at
// once: at most MaxInFlight handlers start after the cancel (those that
// already held capacity), also while an unrelated Publish is blocked.
func testCancelStopsFetching(t *testing.T, s *suite) {
	gate := make(chan struct{})
	be := &blockingPublishBackend{Backend: s.newBackend(t), blockTopic: "conf.blocked." + uniqueSuffix(), gate: gate}
	b := bus.New(be)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("close the bus: %v", err)
		}
	})
	blocked := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
		defer cancel()
		blocked <- b.Publish(ctx, be.blockTopic, &bus.Message{Payload: []byte("held")})
	}()
	defer func() {
		close(gate)
		recv(t, s, blocked, "the blocked publish to return")
	}()

	const maxInFlight = 4
	rounds := count(30, 10)
	topic := "conf.cancel." + uniqueSuffix()
	h := &harness{t: t, s: s, bus: b}
	h.publishN(topic, "m", 200)
	for round := range rounds {
		cancelRound(t, s, b, topic, round, maxInFlight)
	}
}

// cancelRound subscribes a new group to topic, cancels its Subscribe ctx
// while handlers hold their slots, and checks that at most maxInFlight
// handlers started after the cancel.
func cancelRound(t *testing.T, s *suite, b *bus.Bus, topic string, round, maxInFlight int) {
	ctx, cancel := context.WithCancel(context.Background())
	var cancelled atomic.Bool
	var after atomic.Int64
	started := make(chan struct{}, 1)
	// Handlers hold their slot until the cancel, so a round takes at most
	// maxInFlight messages and the group leaves the rest of the topic to
	// later rounds (a backend may drop what every group settled).
	proceed := make(chan struct{})
	opts := []bus.SubscribeOption{bus.WithGroup("g-cancel-" + uniqueSuffix()), bus.WithMaxInFlight(maxInFlight), bus.WithAckTimeout(s.longLease())}
	if s.caps.StartOldest {
		opts = append(opts, bus.WithStartFrom(backend.StartOldest))
	}
	sub, err := b.Subscribe(ctx, topic, func(ctx context.Context, d *bus.Delivery) error {
		if cancelled.Load() {
			after.Add(1)
		}
		trySend(started, struct{}{})
		select {
		case <-proceed:
		case <-ctx.Done():
		}
		return nil
	}, opts...)
	require.NoError(t, err, "round %d: subscribe", round)
	if s.caps.StartOldest {
		recv(t, s, started, "the first handler of the round")
	}
	cancel() // cancels the fetch ctx before it returns
	cancelled.Store(true)
	close(proceed)
	select {
	case <-sub.Done():
	case <-time.After(s.deadline()):
		t.Fatalf("round %d: the subscription did not stop after its ctx was cancelled", round)
	}
	require.LessOrEqual(t, after.Load(), int64(maxInFlight), "round %d: handlers started after the cancel", round)
}

// blockingPublishBackend blocks every Publish to one topic until gate is
// closed, standing for a slow or backpressured publish elsewhere.
type blockingPublishBackend struct {
	backend.Backend
	blockTopic string
	gate       chan struct{}
}

func (b *blockingPublishBackend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if topic == b.blockTopic {
		select {
		case <-b.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.Backend.Publish(ctx, topic, msgs)
}

// testMixedAckTimeouts: the members of a group may subscribe with
// different ack timeouts, and the group then reclaims by the longest one:
// a member with a short timeout never takes over a delivery that a member
// with a long one holds and keeps alive, whichever subscribed first.
func testMixedAckTimeouts(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("mixedlease"), h.group("mixedlease")
	short := s.ackTimeout()
	long := 8 * short // kept alive every long/4: twice the short timeout
	held := make(chan string, 4)
	release := make(chan struct{})
	longIn := &inbox{}
	h.subscribe(context.Background(), topic, longIn.handle(func(ctx context.Context, d *bus.Delivery) error {
		trySend(held, d.ID)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}), bus.WithGroup(group), bus.WithAckTimeout(long), bus.WithMaxInFlight(1), fastRetry())
	m := &bus.Message{Payload: []byte("held by the long-lease member")}
	h.publish(topic, m)
	require.Equal(t, m.ID, recv(t, s, held, "the long-lease member's delivery"))

	shortIn := &inbox{}
	h.subscribe(context.Background(), topic, shortIn.handle(nil), bus.WithGroup(group), bus.WithAckTimeout(short), fastRetry())
	s.never(t, 5*short, func() bool { return shortIn.len() > 0 || longIn.len() > 1 },
		"a member with a %v ack timeout took over a delivery that a member with %v holds and keeps alive", short, long)
	close(release)
	s.never(t, 2*short, func() bool { return shortIn.len() > 0 || longIn.len() > 1 },
		"the acked delivery came back")
	assert.Equal(t, []int{1}, longIn.attempts(m.ID), "the message ran exactly once")
	assert.Empty(t, h.events.scope(observer.ScopeLease), "the long lease was never lost")
}

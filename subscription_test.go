package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

const waitFor = 5 * time.Second

type events struct {
	mu   sync.Mutex
	list []observer.Event
}

func (e *events) Observe(_ context.Context, ev observer.Event) {
	e.mu.Lock()
	e.list = append(e.list, ev)
	e.mu.Unlock()
}

func (e *events) byScope(s observer.Scope) []observer.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []observer.Event
	for _, ev := range e.list {
		if ev.Scope == s {
			out = append(out, ev)
		}
	}
	return out
}

func msg(id string, attempt int) *bus.BackendMessage {
	return &bus.BackendMessage{ID: id, Payload: []byte("p-" + id), Attempt: attempt, PublishedAt: time.Now()}
}

func startFake(t *testing.T, h bus.Handler, opts ...bus.SubscribeOption) (*fakeBackend, *bus.Bus, *events, *bus.Subscription) {
	t.Helper()
	f := newFakeBackend()
	ev := &events{}
	b := bus.New(f, bus.WithObserver(ev), bus.WithAckBatch(4, time.Millisecond))
	s, err := b.Subscribe(context.Background(), "orders", h, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close(context.Background())) })
	return f, b, ev, s
}

func TestAckOnSuccessAcksNilAndNacksErrorWithBackoffDelay(t *testing.T) {
	f, _, ev, _ := startFake(t, func(_ context.Context, d *bus.Delivery) error {
		if d.ID == "bad" {
			return errors.New("boom")
		}
		return nil
	}, bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(250 * time.Millisecond) }))
	f.push(msg("good", 1), msg("bad", 2))
	require.Eventually(t, func() bool {
		acked, nacks, _ := f.snapshot()
		return len(acked) == 1 && len(nacks) == 1
	}, waitFor, time.Millisecond, "one ack and one nack expected")
	acked, nacks, _ := f.snapshot()
	assert.Equal(t, []string{"good"}, acked)
	assert.Equal(t, []fakeNack{{ID: "bad", Delay: 250 * time.Millisecond}}, nacks, "nack carries the backoff delay")
	handlerErrs := ev.byScope(observer.ScopeHandler)
	require.Len(t, handlerErrs, 1, "the handler error reaches the observer")
	assert.Equal(t, "bad", handlerErrs[0].MessageID)
	assert.Equal(t, 2, handlerErrs[0].Attempt)
	assert.Equal(t, "orders", handlerErrs[0].Topic)
	assert.Equal(t, "default", handlerErrs[0].Group)
}

func TestDefaultRetryBackoffGrowsWithAttempt(t *testing.T) {
	var mu sync.Mutex
	f, _, _, _ := startFake(t, func(context.Context, *bus.Delivery) error { return errors.New("boom") })
	_ = &mu
	f.push(msg("a1", 1), msg("a4", 4))
	require.Eventually(t, func() bool { _, n, _ := f.snapshot(); return len(n) == 2 }, waitFor, time.Millisecond)
	_, nacks, _ := f.snapshot()
	delays := map[string]time.Duration{}
	for _, n := range nacks {
		delays[n.ID] = n.Delay
	}
	// 100ms initial, multiplier 1.5, randomization 0.5.
	assert.InDelta(t, float64(100*time.Millisecond), float64(delays["a1"]), float64(50*time.Millisecond), "first retry near 100ms")
	assert.Greater(t, delays["a4"], 150*time.Millisecond, "fourth retry waits longer")
}

func TestMaxDeliveriesDeadLettersWithReasonHeaders(t *testing.T) {
	f, _, ev, _ := startFake(t, func(context.Context, *bus.Delivery) error { return errors.New("still broken") },
		bus.WithMaxDeliveries(3), bus.WithGroup("billing"))
	m := msg("m1", 3)
	m.Headers = map[string]string{"tenant": "t1"}
	f.push(m)
	require.Eventually(t, func() bool { return len(f.publishedTo("orders.dlq")) == 1 }, waitFor, time.Millisecond)
	dl := f.publishedTo("orders.dlq")[0]
	assert.Equal(t, "m1", dl.ID)
	assert.Equal(t, "p-m1", string(dl.Payload))
	assert.Equal(t, "t1", dl.Headers["tenant"], "user headers are kept")
	assert.Contains(t, dl.Headers[bus.HeaderDeadLetterReason], "still broken")
	assert.Equal(t, "orders", dl.Headers[bus.HeaderDeadLetterTopic])
	assert.Equal(t, "billing", dl.Headers[bus.HeaderDeadLetterGroup])
	assert.Equal(t, "3", dl.Headers[bus.HeaderDeadLetterAttempt])
	assert.Equal(t, "m1", dl.Headers[bus.HeaderDeadLetterID])
	require.Eventually(t, func() bool { a, _, _ := f.snapshot(); return len(a) == 1 }, waitFor, time.Millisecond, "the original is acked after dead-lettering")
	_, nacks, _ := f.snapshot()
	assert.Empty(t, nacks, "no nack once max deliveries is reached")
	assert.Len(t, ev.byScope(observer.ScopeHandler), 1)
}

func TestRejectedErrorDeadLettersOnFirstAttempt(t *testing.T) {
	f, _, _, _ := startFake(t, func(context.Context, *bus.Delivery) error { return bus.Reject(errors.New("schema mismatch")) })
	f.push(msg("p1", 1))
	require.Eventually(t, func() bool { return len(f.publishedTo("orders.dlq")) == 1 }, waitFor, time.Millisecond)
	assert.Contains(t, f.publishedTo("orders.dlq")[0].Headers[bus.HeaderDeadLetterReason], "schema mismatch")
}

func TestDeadLetterOffDropsAndReports(t *testing.T) {
	f, _, ev, _ := startFake(t, func(context.Context, *bus.Delivery) error { return bus.Reject(errors.New("nope")) }, bus.WithDeadLetter(""))
	f.push(msg("d1", 1))
	require.Eventually(t, func() bool { a, _, _ := f.snapshot(); return len(a) == 1 }, waitFor, time.Millisecond, "dropped message is acked")
	require.Eventually(t, func() bool { return len(ev.byScope(observer.ScopeDeadLetter)) == 1 }, waitFor, time.Millisecond, "the drop is reported")
	assert.Empty(t, f.publishedTo("orders.dlq"))
}

func TestPanicIsRecoveredReportedWithStackAndRetried(t *testing.T) {
	f, _, ev, _ := startFake(t, func(context.Context, *bus.Delivery) error { panic("kaboom") })
	f.push(msg("x", 1))
	require.Eventually(t, func() bool { _, n, _ := f.snapshot(); return len(n) == 1 }, waitFor, time.Millisecond, "a panic nacks")
	p := ev.byScope(observer.ScopePanic)
	require.Len(t, p, 1)
	assert.Contains(t, p[0].Err.Error(), "kaboom")
	assert.Contains(t, string(p[0].Stack), "subscription_test.go", "the stack points at the handler")
}

func TestAckOnReceiveAcksBeforeHandlerAndReportsError(t *testing.T) {
	outcome := make(chan bus.Outcome, 1)
	f, _, ev, _ := startFake(t, func(_ context.Context, d *bus.Delivery) error {
		outcome <- d.Outcome()
		return errors.New("lost")
	}, bus.WithAckMode(bus.AckOnReceive))
	f.push(msg("r", 1))
	select {
	case o := <-outcome:
		assert.Equal(t, bus.OutcomeAcked, o, "acked before the handler runs")
	case <-time.After(waitFor):
		t.Fatal("handler not called")
	}
	require.Eventually(t, func() bool { return len(ev.byScope(observer.ScopeHandler)) == 1 }, waitFor, time.Millisecond)
	_, nacks, _ := f.snapshot()
	assert.Empty(t, nacks, "no retry in AckOnReceive")
}

func TestManualDeliveryKeepsSlotUntilSettled(t *testing.T) {
	held := make(chan *bus.Delivery, 4)
	f, _, _, _ := startFake(t, func(_ context.Context, d *bus.Delivery) error {
		held <- d
		return nil
	}, bus.WithAckMode(bus.AckManual), bus.WithMaxInFlight(1))
	f.push(msg("m1", 1), msg("m2", 1))
	var d1 *bus.Delivery
	select {
	case d1 = <-held:
	case <-time.After(waitFor):
		t.Fatal("first delivery not handled")
	}
	select {
	case d := <-held:
		t.Fatalf("second delivery %s started while the first held the only slot", d.ID)
	case <-time.After(100 * time.Millisecond):
	}
	// Settle from another goroutine.
	go func() { _ = d1.Ack(context.Background()) }()
	select {
	case d2 := <-held:
		assert.Equal(t, "m2", d2.ID)
		require.NoError(t, d2.Nack(context.Background(), 0))
	case <-time.After(waitFor):
		t.Fatal("second delivery not handled after the first was settled")
	}
	for _, c := range f.receiveCalls() {
		assert.Equal(t, 1, c, "Receive asks only for free capacity")
	}
}

func TestSettlingTwiceReturnsErrAlreadySettled(t *testing.T) {
	errs := make(chan error, 3)
	_, _, _, _ = startFakeWithPush(t, func(ctx context.Context, d *bus.Delivery) error {
		errs <- d.Ack(ctx)
		errs <- d.Nack(ctx, 0)
		errs <- d.Reject(ctx, errors.New("x"))
		return nil
	}, msg("s", 1))
	require.NoError(t, recv(t, errs), "first settlement wins")
	assert.ErrorIs(t, recv(t, errs), bus.ErrAlreadySettled)
	assert.ErrorIs(t, recv(t, errs), bus.ErrAlreadySettled)
}

func startFakeWithPush(t *testing.T, h bus.Handler, msgs ...*bus.BackendMessage) (*fakeBackend, *bus.Bus, *events, *bus.Subscription) {
	f, b, ev, s := startFake(t, h, bus.WithAckMode(bus.AckManual))
	f.push(msgs...)
	return f, b, ev, s
}

func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitFor):
		t.Fatal("timed out waiting for a value")
		panic("unreachable")
	}
}

func TestHandlerTimeoutCountsAsFailure(t *testing.T) {
	f, _, ev, _ := startFake(t, func(ctx context.Context, _ *bus.Delivery) error {
		<-ctx.Done()
		return nil // ignores the error: the bus still counts it
	}, bus.WithHandlerTimeout(20*time.Millisecond))
	f.push(msg("slow", 1))
	require.Eventually(t, func() bool { _, n, _ := f.snapshot(); return len(n) == 1 }, waitFor, time.Millisecond, "timed-out handler is nacked")
	errs := ev.byScope(observer.ScopeHandler)
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0].Err, context.DeadlineExceeded)
}

func TestMaxInFlightIsNeverExceeded(t *testing.T) {
	const limit, total = 5, 200
	var running, peak atomic.Int32
	f, _, _, _ := startFake(t, func(context.Context, *bus.Delivery) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(time.Millisecond) // work, not synchronisation
		running.Add(-1)
		return nil
	}, bus.WithMaxInFlight(limit))
	for i := range total {
		f.push(msg(strconv.Itoa(i), 1))
	}
	require.Eventually(t, func() bool { a, _, _ := f.snapshot(); return len(a) == total }, waitFor, time.Millisecond)
	assert.LessOrEqual(t, int(peak.Load()), limit, "handlers running at once")
	assert.Equal(t, limit, int(peak.Load()), "the limit is reached under load")
	for _, c := range f.receiveCalls() {
		assert.LessOrEqual(t, c, limit, "Receive asks for at most the free capacity")
	}
}

func TestSharedLimiterCapsTwoSubscriptions(t *testing.T) {
	f := newFakeBackend()
	b := bus.New(f, bus.WithAckBatch(4, time.Millisecond))
	defer b.Close(context.Background())
	shared := bus.NewConcurrencyLimiter(3)
	var running, peak atomic.Int32
	h := func(context.Context, *bus.Delivery) error {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		return nil
	}
	for i := range 2 {
		_, err := b.Subscribe(context.Background(), "orders", h, bus.WithLimiter(shared), bus.WithMaxInFlight(10), bus.WithGroup(fmt.Sprintf("g%d", i)))
		require.NoError(t, err)
	}
	for i := range 100 {
		f.push(msg(strconv.Itoa(i), 1))
	}
	require.Eventually(t, func() bool { a, _, _ := f.snapshot(); return len(a) == 100 }, waitFor, time.Millisecond)
	assert.LessOrEqual(t, int(peak.Load()), 3, "the shared limiter caps both subscriptions together")
	require.Eventually(t, func() bool { return shared.(interface{ InUse() int }).InUse() <= 2 }, waitFor, time.Millisecond, "an idle subscription holds at most one unit of a shared limiter")
}

func TestCloseDrainsInFlightAndFlushesAcksBeforeBackendClose(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	f := newFakeBackend()
	b := bus.New(f, bus.WithAckBatch(1000, time.Hour)) // acks flush only on close
	s, err := b.Subscribe(context.Background(), "orders", func(context.Context, *bus.Delivery) error {
		started <- struct{}{}
		<-release
		return nil
	})
	require.NoError(t, err)
	f.push(msg("a", 1), msg("b", 1))
	recv(t, started)
	recv(t, started)
	closed := make(chan error)
	go func() { closed <- s.Close(context.Background()) }()
	select {
	case <-closed:
		t.Fatal("Close returned while handlers were running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	require.NoError(t, recv(t, closed))
	f.mu.Lock()
	assert.Equal(t, 2, f.ackedAtClose, "acks were flushed before the backend subscription closed")
	f.mu.Unlock()
	<-s.Done()
	require.NoError(t, b.Close(context.Background()))
}

func TestCloseCancelsHandlersWhenCtxEnds(t *testing.T) {
	f := newFakeBackend()
	b := bus.New(f)
	gotCancel := make(chan struct{})
	s, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, _ *bus.Delivery) error {
		<-ctx.Done()
		close(gotCancel)
		return ctx.Err()
	})
	require.NoError(t, err)
	f.push(msg("a", 1))
	require.Eventually(t, func() bool { return len(f.receiveCalls()) > 0 }, waitFor, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = s.Close(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Close reports that it had to cancel handlers")
	recv(t, gotCancel)
	_, nacks, _ := f.snapshot()
	require.Len(t, nacks, 1, "the cancelled handler's message is handed back")
	assert.Zero(t, nacks[0].Delay, "handed back at once on shutdown")
	require.NoError(t, b.Close(context.Background()))
}

func TestCancellingSubscribeCtxStopsSubscription(t *testing.T) {
	f := newFakeBackend()
	b := bus.New(f)
	defer b.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	s, err := b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error { return nil })
	require.NoError(t, err)
	cancel()
	select {
	case <-s.Done():
	case <-time.After(waitFor):
		t.Fatal("subscription did not stop when its ctx ended")
	}
	assert.NoError(t, s.Err(), "a ctx stop is clean")
}

func TestExtendWithoutBackendSupportIsUnsupported(t *testing.T) {
	errs := make(chan error, 1)
	startFakeWithPush(t, func(ctx context.Context, d *bus.Delivery) error {
		errs <- d.Extend(ctx)
		return d.Ack(ctx)
	}, msg("e", 1))
	assert.ErrorIs(t, recv(t, errs), bus.ErrUnsupported)
}

func TestManualLeaseExpiryFreesSlot(t *testing.T) {
	held := make(chan *bus.Delivery, 4)
	f, _, ev, _ := startFake(t, func(_ context.Context, d *bus.Delivery) error {
		held <- d
		return nil
	}, bus.WithAckMode(bus.AckManual), bus.WithMaxInFlight(1), bus.WithAckTimeout(50*time.Millisecond))
	f.push(msg("m1", 1), msg("m2", 1))
	d1 := recv(t, held)
	d2 := recv(t, held) // only possible after m1's lease ran out
	assert.Equal(t, "m2", d2.ID)
	assert.ErrorIs(t, d1.Ack(context.Background()), bus.ErrAlreadySettled, "an expired lease cannot be acked")
	assert.Equal(t, bus.OutcomeLeaseLost, d1.Outcome())
	require.NotEmpty(t, ev.byScope(observer.ScopeLease))
	require.NoError(t, d2.Ack(context.Background()))
}

func TestSubscribeRejectsInvalidOptions(t *testing.T) {
	b := bus.New(newFakeBackend())
	defer b.Close(context.Background())
	h := func(context.Context, *bus.Delivery) error { return nil }
	tests := []struct {
		name string
		opt  bus.SubscribeOption
	}{
		{"zero in flight", bus.WithMaxInFlight(0)},
		{"tiny ack timeout", bus.WithAckTimeout(time.Microsecond)},
		{"zero deliveries", bus.WithMaxDeliveries(0)},
		{"bad group", bus.WithGroup("a b")},
		{"bad dlq", bus.WithDeadLetter("x..y")},
		{"nil limiter", bus.WithLimiter(nil)},
		{"bad ack mode", bus.WithAckMode(bus.AckMode("eventually"))},
		{"negative handler timeout", bus.WithHandlerTimeout(-time.Second)},
		{"unsupported start", bus.WithStartFrom(bus.StartOldest)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.Subscribe(context.Background(), "orders", h, tt.opt)
			require.Error(t, err)
			assert.True(t, errors.Is(err, bus.ErrInvalidOption) || errors.Is(err, bus.ErrUnsupported), "got %v", err)
		})
	}
}

func TestSubscribeRejectsContradictoryOptions(t *testing.T) {
	b := bus.New(newFakeBackend())
	defer b.Close(context.Background())
	h := func(context.Context, *bus.Delivery) error { return nil }
	tests := []struct {
		name string
		opts []bus.SubscribeOption
		want string
	}{
		{"ack on receive with max deliveries", []bus.SubscribeOption{bus.WithAckMode(bus.AckOnReceive), bus.WithMaxDeliveries(3)},
			"WithMaxDeliveries bounds redeliveries, and AckOnReceive acks before the handler runs, so nothing is redelivered; drop WithMaxDeliveries, or use AckOnSuccess or AckManual"},
		{"max deliveries then ack on receive", []bus.SubscribeOption{bus.WithMaxDeliveries(3), bus.WithAckMode(bus.AckOnReceive)},
			"nothing is redelivered"},
		{"two groups", []bus.SubscribeOption{bus.WithGroup("a"), bus.WithGroup("b")},
			`WithGroup given twice ("a", then "b"); a subscription has one group`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.Subscribe(context.Background(), "orders", h, tt.opts...)
			require.ErrorIs(t, err, bus.ErrInvalidOption, "contradictory options are refused")
			assert.Contains(t, err.Error(), tt.want, "the error says what to do")
		})
	}
	// The same group twice, and max deliveries with the other ack modes,
	// say nothing contradictory.
	for _, opts := range [][]bus.SubscribeOption{
		{bus.WithGroup("a"), bus.WithGroup("a")},
		{bus.WithAckMode(bus.AckManual), bus.WithMaxDeliveries(3)},
		{bus.WithAckMode(bus.AckOnReceive)},
	} {
		s, err := b.Subscribe(context.Background(), "orders", h, opts...)
		require.NoError(t, err, "consistent options are accepted")
		require.NoError(t, s.Close(context.Background()))
	}
}

func TestLoggerRecordsSubscriptionLifecycleWithoutPayloads(t *testing.T) {
	var buf safeBuffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := newFakeBackend()
	b := bus.New(f, bus.WithLogger(logger))
	s, err := b.Subscribe(context.Background(), "orders", func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup("billing"))
	require.NoError(t, err)
	f.push(msg("secret-payload", 1))
	require.Eventually(t, func() bool { a, _, _ := f.snapshot(); return len(a) == 1 }, waitFor, time.Millisecond)
	require.NoError(t, s.Close(context.Background()))
	require.NoError(t, b.Close(context.Background()))
	out := buf.String()
	assert.Contains(t, out, "bus: subscribed")
	assert.Contains(t, out, "group=billing")
	assert.Contains(t, out, "bus: subscription closed")
	assert.NotContains(t, out, "p-secret-payload", "payloads are never logged")
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// greedySub returns twice what it is asked for, breaking the SPI contract.
type greedyBackend struct{ *fakeBackend }

func (g greedyBackend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	s, _ := g.fakeBackend.Subscribe(ctx, topic, cfg)
	return greedySub{s.(*fakeSub)}, nil
}

type greedySub struct{ *fakeSub }

func (g greedySub) Receive(ctx context.Context, max int) ([]*bus.BackendMessage, error) {
	return g.fakeSub.Receive(ctx, 2*max)
}

func TestBackendReturningTooManyMessagesCannotExceedMaxInFlight(t *testing.T) {
	f := newFakeBackend()
	ev := &events{}
	b := bus.New(greedyBackend{f}, bus.WithObserver(ev))
	var running, peak atomic.Int32
	_, err := b.Subscribe(context.Background(), "orders", func(context.Context, *bus.Delivery) error {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		return nil
	}, bus.WithMaxInFlight(2))
	require.NoError(t, err)
	for i := range 10 {
		f.push(msg(strconv.Itoa(i), 1))
	}
	require.Eventually(t, func() bool { _, n, _ := f.snapshot(); return len(n) > 0 }, waitFor, time.Millisecond, "excess messages are handed back")
	require.NoError(t, b.Close(context.Background()))
	assert.LessOrEqual(t, int(peak.Load()), 2, "max in flight holds even against a greedy backend")
	assert.NotEmpty(t, ev.byScope(observer.ScopeReceive), "the contract breach is reported")
}

// closeFailSub fails its Close, to show where such an error goes when no
// caller is waiting for it.
type closeFailBackend struct{ *fakeBackend }

func (c closeFailBackend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	s, _ := c.fakeBackend.Subscribe(ctx, topic, cfg)
	return closeFailSub{s.(*fakeSub)}, nil
}

type closeFailSub struct{ *fakeSub }

func (closeFailSub) Close() error { return errors.New("connection reset") }

func TestCloseErrorAfterCtxCancelGoesToObserver(t *testing.T) {
	ev := &events{}
	b := bus.New(closeFailBackend{newFakeBackend()}, bus.WithObserver(ev))
	defer b.Close(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	s, err := b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error { return nil })
	require.NoError(t, err)
	cancel()
	recvDone(t, s.Done())
	require.Eventually(t, func() bool { return len(ev.byScope(observer.ScopeShutdown)) == 1 }, waitFor, time.Millisecond,
		"a close error with no caller to return to reaches the observer")
	assert.Contains(t, ev.byScope(observer.ScopeShutdown)[0].Err.Error(), "connection reset")
}

func recvDone(t *testing.T, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(waitFor):
		t.Fatal("subscription did not stop")
	}
}

// Handlers that turn slow get a worker each, whatever the quick ones
// before them taught the dispatcher: here eight handlers can only return
// once all eight run at the same time.
func TestHandlersThatTurnSlowAllGetAWorker(t *testing.T) {
	const n = 8
	var arrived atomic.Int32
	all, done := make(chan struct{}), make(chan struct{})
	var handled atomic.Int32
	f, _, _, _ := startFake(t, func(_ context.Context, d *bus.Delivery) error {
		defer handled.Add(1)
		if !strings.HasPrefix(d.ID, "wait") {
			return nil
		}
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
		case <-done: // the test failed; let Close drain
		}
		return nil
	}, bus.WithMaxInFlight(n))
	t.Cleanup(func() { close(done) }) // runs before the bus closes
	for i := range 64 {
		f.push(msg("quick"+strconv.Itoa(i), 1))
	}
	require.Eventually(t, func() bool { return handled.Load() == 64 }, waitFor, time.Millisecond, "the quick handlers run")
	for i := range n {
		f.push(msg("wait"+strconv.Itoa(i), 1))
	}
	require.Eventually(t, func() bool { return arrived.Load() == n }, waitFor, time.Millisecond,
		"all %d handlers must run at once (max in flight %d)", n, n)
	require.Eventually(t, func() bool { return handled.Load() == 64+n }, waitFor, time.Millisecond, "and then return")
}

// After a forced Close, the settlements of handlers that outlived it are
// dropped, as Close's error says: they are counted and reported once, not
// as one error each.
func TestLateSettlementsAfterForcedCloseAreReportedOnce(t *testing.T) {
	const n = 3
	f := newFakeBackend()
	ev := &events{}
	b := bus.New(f, bus.WithObserver(ev))
	var started sync.WaitGroup
	started.Add(n)
	release := make(chan struct{})
	s, err := b.Subscribe(context.Background(), "orders", func(context.Context, *bus.Delivery) error {
		started.Done()
		<-release // ignores its ctx
		return nil
	})
	require.NoError(t, err)
	for i := range n {
		f.push(msg("m-"+strconv.Itoa(i), 1))
	}
	started.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorContains(t, s.Close(ctx), "late settlements will be dropped", "Close says the late settlements are dropped")
	close(release)
	recvDone(t, s.Done())
	assert.Empty(t, ev.byScope(observer.ScopeAck), "no error per late settlement")
	lease := ev.byScope(observer.ScopeLease)
	require.Len(t, lease, 1, "one event for the late settlements")
	assert.ErrorContains(t, lease[0].Err, "3 late settlement(s) of handlers that outlived Close were dropped")
	assert.Equal(t, slog.LevelWarn, observer.Level(lease[0]), "logged once at Warn")
	assert.Equal(t, "orders", lease[0].Topic)
	require.NoError(t, b.Close(context.Background()))
}

// The shutdown's error goes to one caller: when the first Close returns
// it, a Close after the shutdown returns nil, also when the Closes that
// waited for it gave up before the shutdown ended.
func TestShutdownErrorGoesToTheFirstCloseOnly(t *testing.T) {
	f := newFakeBackend()
	b := bus.New(f)
	started, release := make(chan struct{}), make(chan struct{})
	s, err := b.Subscribe(context.Background(), "orders", func(context.Context, *bus.Delivery) error {
		close(started)
		<-release // ignores its ctx: Done waits for it
		return nil
	})
	require.NoError(t, err)
	f.push(msg("a", 1))
	recv(t, started)
	closeShort := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		return s.Close(ctx)
	}
	require.ErrorContains(t, closeShort(), "still running", "the first Close returns the shutdown's error")
	require.ErrorContains(t, closeShort(), "still running", "a Close that gives up before the shutdown ends says so")
	close(release)
	recvDone(t, s.Done())
	assert.NoError(t, s.Close(context.Background()), "the error went to the first Close; a Close after the shutdown returns nil")
	require.NoError(t, b.Close(context.Background()))
}

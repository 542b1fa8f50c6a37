package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// deadLetterReader subscribes to a dead-letter topic before anything can
// be dead-lettered, so a newest group sees every copy.
func (h *harness) deadLetterReader(dlq string) *inbox {
	h.t.Helper()
	in := &inbox{}
	h.subscribe(context.Background(), dlq, in.handle(nil),
		bus.WithGroup(h.group("dlq")), bus.WithAckTimeout(h.s.longLease()), bus.WithDeadLetter(""))
	return in
}

// requireDeadLetterCopy checks the headers of a dead-lettered copy of m.
func requireDeadLetterCopy(t testing.TB, got received, m *bus.Message, topic, group string, attempt int, reason string) {
	t.Helper()
	assert.Equal(t, m.Payload, got.Payload, "the dead-letter copy keeps the payload")
	assert.Equal(t, m.Key, got.Key, "the dead-letter copy keeps the key")
	for k, v := range m.Headers {
		assert.Equal(t, v, got.Headers[k], "the dead-letter copy keeps user header %q", k)
	}
	assert.Contains(t, got.Headers[backend.HeaderDeadLetterReason], reason, "reason header")
	assert.Equal(t, topic, got.Headers[backend.HeaderDeadLetterTopic], "original topic header")
	assert.Equal(t, group, got.Headers[backend.HeaderDeadLetterGroup], "group header")
	assert.Equal(t, strconv.Itoa(attempt), got.Headers[backend.HeaderDeadLetterAttempt], "attempt header")
	assert.Equal(t, m.ID, got.Headers[backend.HeaderDeadLetterID], "original ID header")
}

// testMaxDeliveriesDeadLetter: a message that keeps failing is tried max
// deliveries times, then dead-lettered with the reason headers.
func testMaxDeliveriesDeadLetter(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("maxdel"), h.group("maxdel")
	dlq := h.deadLetterReader(topic + ".dlq")
	in := &inbox{}
	const maxDeliveries = 3
	h.subscribe(context.Background(), topic, in.handle(func(context.Context, *bus.Delivery) error {
		return errHandler
	}), bus.WithGroup(group), bus.WithMaxDeliveries(maxDeliveries), bus.WithAckTimeout(s.longLease()), fastRetry())

	m := &bus.Message{Key: "k-1", Headers: map[string]string{"x-origin": "conformance"}, Payload: []byte("poison")}
	h.publish(topic, m)
	s.eventually(t, func() bool { return dlq.len() >= 1 }, "the message should reach the dead-letter topic")
	s.never(t, s.ackTimeout(), func() bool { return len(in.of(m.ID)) > maxDeliveries || dlq.len() > 1 },
		"no delivery after the last attempt and a single dead-letter copy")
	assert.Equal(t, []int{1, 2, 3}, in.attempts(m.ID), "tried exactly max deliveries times")
	requireDeadLetterCopy(t, dlq.all()[0], m, topic, group, maxDeliveries, errHandler.Error())
	assert.Contains(t, dlq.all()[0].Headers[backend.HeaderDeadLetterReason], "max deliveries", "the reason names the limit")
	assert.Len(t, h.events.scope(observer.ScopeHandler), maxDeliveries, "each failed attempt is reported")
}

// testExpiredLeasesDeadLetter: a manual delivery whose lease keeps
// running out is dead-lettered once it comes back past max deliveries,
// without running the handler again.
func testExpiredLeasesDeadLetter(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("expired"), h.group("expired")
	dlq := h.deadLetterReader(topic + ".dlq")
	in := &inbox{}
	const maxDeliveries = 2
	h.subscribe(context.Background(), topic, in.handle(func(context.Context, *bus.Delivery) error {
		return nil // never settled: every lease runs out
	}), bus.WithGroup(group), bus.WithAckMode(bus.AckManual), bus.WithMaxDeliveries(maxDeliveries),
		bus.WithAckTimeout(s.ackTimeout()))

	m := &bus.Message{Headers: map[string]string{"x-origin": "conformance"}, Payload: []byte("abandoned")}
	h.publish(topic, m)
	s.eventually(t, func() bool { return dlq.len() >= 1 }, "the message is dead-lettered after %d leases ran out", maxDeliveries)
	s.never(t, s.quiet(), func() bool { return len(in.of(m.ID)) > maxDeliveries || dlq.len() > 1 },
		"nothing is delivered after the dead-letter")
	assert.Equal(t, []int{1, 2}, in.attempts(m.ID), "the handler runs only within max deliveries")
	requireDeadLetterCopy(t, dlq.all()[0], m, topic, group, maxDeliveries+1, "max deliveries")
}

// testRejectDeadLetter: an error marked with bus.Reject skips the retries.
func testRejectDeadLetter(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("permanent"), h.group("permanent")
	custom := h.topic("permanent-dead")
	dlq := h.deadLetterReader(custom)
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(func(context.Context, *bus.Delivery) error {
		return bus.Reject(fmt.Errorf("bad input: %w", errHandler))
	}), bus.WithGroup(group), bus.WithDeadLetter(custom), bus.WithAckTimeout(s.ackTimeout()), fastRetry())

	m := &bus.Message{Headers: map[string]string{"x-origin": "conformance"}, Payload: []byte("unparseable")}
	h.publish(topic, m)
	s.eventually(t, func() bool { return dlq.len() >= 1 }, "a rejected error goes to the dead-letter topic %q", custom)
	if s.caps.Redelivery {
		s.never(t, s.quiet(), func() bool { return in.len() > 1 }, "a rejected error is never retried")
	}
	assert.Equal(t, []int{1}, in.attempts(m.ID), "handled once")
	requireDeadLetterCopy(t, dlq.all()[0], m, topic, group, 1, "bad input")
}

// testRejectDeadLetters: Reject in manual mode dead-letters; with
// dead-lettering off the message is dropped and reported.
func testRejectDeadLetters(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("reject"), h.group("reject")
	dlq := h.deadLetterReader(topic + ".dlq")
	in := &inbox{}
	rejected := make(chan error, 2)
	reject := func(ctx context.Context, d *bus.Delivery) error {
		trySend(rejected, d.Reject(ctx, errors.New("rejected by the conformance suite")))
		return nil
	}
	h.subscribe(context.Background(), topic, in.handle(reject),
		bus.WithGroup(group), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(s.ackTimeout()))

	m := &bus.Message{Payload: []byte("no thanks")}
	h.publish(topic, m)
	require.NoError(t, recv(t, s, rejected, "the Reject"), "Reject succeeds")
	s.eventually(t, func() bool { return dlq.len() >= 1 }, "a rejected message goes to the dead-letter topic")
	requireDeadLetterCopy(t, dlq.all()[0], m, topic, group, 1, "rejected by the conformance suite")
	assert.Equal(t, bus.OutcomeDeadLettered, in.of(m.ID)[0].Delivery.Outcome(), "outcome of a rejected delivery")

	// Dead-lettering off: the message is dropped and the drop reported.
	off := h.topic("reject-off")
	inOff := &inbox{}
	h.subscribe(context.Background(), off, inOff.handle(reject),
		bus.WithGroup(group), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(s.ackTimeout()), bus.WithDeadLetter(""))
	dropped := &bus.Message{Payload: []byte("dropped")}
	h.publish(off, dropped)
	require.NoError(t, recv(t, s, rejected, "the Reject with dead-lettering off"), "Reject succeeds")
	s.eventually(t, func() bool { return h.events.has(forMessage(observer.ScopeDeadLetter, dropped.ID)) },
		"a drop with dead-lettering off is reported with ScopeDeadLetter")
	assert.Equal(t, bus.OutcomeDropped, inOff.of(dropped.ID)[0].Delivery.Outcome(), "outcome with dead-lettering off")
	if s.caps.Redelivery {
		s.never(t, s.quiet(), func() bool { return in.len() > 1 || inOff.len() > 1 }, "a rejected message is never retried")
	}
}

// testPanicRecovered: a handler panic is recovered, reported with
// ScopePanic and a stack, and the message retried.
func testPanicRecovered(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("panic"), h.group("panic")
	errPanic := errors.New("conformance: handler panic")
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(func(_ context.Context, d *bus.Delivery) error {
		if d.Attempt == 1 {
			panic(errPanic)
		}
		return nil
	}), bus.WithGroup(group), bus.WithAckTimeout(s.longLease()), fastRetry())

	m := &bus.Message{Payload: []byte("explosive")}
	h.publish(topic, m)
	s.eventually(t, func() bool { return h.events.has(forMessage(observer.ScopePanic, m.ID)) },
		"the panic should reach the observer with ScopePanic")
	e, _ := h.events.find(forMessage(observer.ScopePanic, m.ID))
	assert.Equal(t, topic, e.Topic, "panic event topic")
	assert.Equal(t, group, e.Group, "panic event group")
	assert.Equal(t, 1, e.Attempt, "panic event attempt")
	assert.ErrorIs(t, e.Err, errPanic, "the panic value is in the error chain")
	assert.NotEmpty(t, e.Stack, "a panic event carries the stack")
	assert.Contains(t, string(e.Stack), "panic", "the stack is the panicking goroutine's")
	if !s.caps.Redelivery {
		return
	}
	s.eventually(t, func() bool { return len(in.of(m.ID)) >= 2 }, "a panicked message is retried")
	assert.Equal(t, []int{1, 2}, in.attempts(m.ID)[:2], "the retry is attempt 2")
}

// testObserverHandlerErrors: handler errors and panics reach the observer
// with the right scope, topic, group, message ID and attempt.
func testObserverHandlerErrors(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("observer"), h.group("observer")
	failing := &bus.Message{Payload: []byte("fails")}
	panicking := &bus.Message{Payload: []byte("panics")}
	h.subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		if d.Attempt > 1 {
			return nil
		}
		switch d.ID {
		case failing.ID:
			return fmt.Errorf("wrapped: %w", errHandler)
		case panicking.ID:
			panic("conformance: a string panic")
		}
		return nil
	}, bus.WithGroup(group), bus.WithAckTimeout(s.longLease()), fastRetry())

	h.publish(topic, failing, panicking)
	s.eventually(t, func() bool {
		return h.events.has(forMessage(observer.ScopeHandler, failing.ID)) &&
			h.events.has(forMessage(observer.ScopePanic, panicking.ID))
	}, "both the handler error and the panic should reach the observer")

	tests := []struct {
		name  string
		scope observer.Scope
		id    string
		check func(t *testing.T, e observer.Event)
	}{
		{"handler error", observer.ScopeHandler, failing.ID, func(t *testing.T, e observer.Event) {
			assert.ErrorIs(t, e.Err, errHandler, "the handler's error is reported")
			assert.Empty(t, e.Stack, "a plain error has no stack")
		}},
		{"panic", observer.ScopePanic, panicking.ID, func(t *testing.T, e observer.Event) {
			assert.ErrorContains(t, e.Err, "conformance: a string panic", "the panic value is reported")
			assert.NotEmpty(t, e.Stack, "a panic carries the stack")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := h.events.find(forMessage(tt.scope, tt.id))
			require.True(t, ok, "an event with scope %v for message %q", tt.scope, tt.id)
			assert.Equal(t, topic, e.Topic, "event topic")
			assert.Equal(t, group, e.Group, "event group")
			assert.Equal(t, 1, e.Attempt, "event attempt")
			tt.check(t, e)
		})
	}
}

// testReturnedNack: a handler error marked with bus.Nack is retried
// after its own delay, not the subscription's backoff, and counts as an
// attempt.
func testReturnedNack(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("retryafter"), h.group("retryafter")
	after := 4 * s.ackTimeout() / 10
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt == 1 {
			return bus.Nack(errors.New("429: retry later"), after)
		}
		return nil
	}), bus.WithGroup(group), bus.WithAckTimeout(s.longLease()), fastRetry())
	m := &bus.Message{Payload: []byte("throttled")}
	h.publish(topic, m)
	s.eventually(t, func() bool { return len(in.attempts(m.ID)) >= 2 }, "the retry arrives")
	got := in.of(m.ID)
	require.Len(t, got, 2)
	assert.Equal(t, []int{1, 2}, []int{got[0].Attempt, got[1].Attempt}, "the retry counts as an attempt")
	assert.GreaterOrEqual(t, got[1].At.Sub(got[0].At), after, "retried after the handler's delay, not the %v backoff", 10*time.Millisecond)
}

// testRetryDelayEveryAttempt: a failing message retried with a constant
// backoff comes back no earlier than the backoff after its handler
// returned, on every attempt, not only the first. How late each retry
// came is logged, not asserted: brokers' timers and a loaded machine set
// it.
func testRetryDelayEveryAttempt(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("retrydelay")
	delay := s.cfg.dur(300 * time.Millisecond)
	const retries = 5
	var (
		mu       sync.Mutex
		returned []time.Time
	)
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt > retries {
			return nil
		}
		mu.Lock()
		returned = append(returned, time.Now())
		mu.Unlock()
		return errHandler
	}), bus.WithGroup(h.group("retrydelay")), bus.WithAckTimeout(s.longLease()), bus.WithMaxDeliveries(retries+2),
		bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(delay) }))
	m := &bus.Message{Payload: []byte("again and again")}
	h.publish(topic, m)
	s.eventually(t, func() bool { return len(in.of(m.ID)) > retries }, "the message is retried %d times", retries)
	got := in.of(m.ID)
	mu.Lock()
	defer mu.Unlock()
	gaps := make([]time.Duration, retries)
	for i := range gaps {
		gaps[i] = got[i+1].At.Sub(returned[i])
	}
	t.Logf("%s: a retry after %v, %d times, came after %v", s.caps.Name, delay, retries, gaps)
	for i, g := range gaps {
		assert.GreaterOrEqual(t, g, delay, "retry %d came %v after the handler returned, before the backoff of %v", i+1, g, delay)
		assert.Equal(t, i+2, got[i+1].Attempt, "retry %d is attempt %d", i+1, i+2)
	}
}

// testExpiresAt: a message delivered at or after its ExpiresAt never
// reaches the handler and is dead-lettered with code expired; one that has
// not expired arrives with its ExpiresAt and its headers as published; a
// retry that would come after ExpiresAt dead-letters the message at once.
func testExpiresAt(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("expires"), h.group("expires")
	dlq := &inbox{}
	h.subscribe(context.Background(), topic+".dlq", dlq.handle(nil), bus.WithGroup(group))
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "flaky" {
			return bus.Nack(errors.New("try again in an hour"), time.Hour)
		}
		return nil
	}), bus.WithGroup(group), bus.WithAckTimeout(s.longLease()), fastRetry())
	later := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	stale := &bus.Message{Payload: []byte("stale"), ExpiresAt: time.Now().Add(-time.Second)}
	fresh := &bus.Message{Payload: []byte("fresh"), Headers: map[string]string{"tenant": "a"}, ExpiresAt: later}
	plain := &bus.Message{Payload: []byte("plain")}
	flaky := &bus.Message{Payload: []byte("flaky"), ExpiresAt: later}
	h.publish(topic, stale, fresh, plain, flaky)
	s.eventually(t, func() bool { return dlq.len() >= 2 && len(in.of(fresh.ID)) > 0 && len(in.of(plain.ID)) > 0 },
		"the stale and the flaky message dead-lettered, the others handled")
	assert.Empty(t, in.of(stale.ID), "an expired message never reaches the handler")
	expired := []string{stale.ID}
	if s.caps.Redelivery {
		// Without redelivery a failure is dead-lettered at once anyway.
		expired = append(expired, flaky.ID)
	}
	for _, id := range expired {
		got := dlq.of(id)
		require.Len(t, got, 1, "%s dead-lettered once", id)
		assert.Equal(t, string(backend.CodeExpired), got[0].Headers[backend.HeaderDeadLetterCode], "%s: code", id)
	}
	assert.Len(t, in.of(flaky.ID), 1, "the retry that would outlive ExpiresAt never happens")
	f := in.of(fresh.ID)[0]
	assert.True(t, later.Equal(f.Delivery.ExpiresAt), "ExpiresAt arrives: %v, want %v", f.Delivery.ExpiresAt, later)
	assert.Equal(t, map[string]string{"tenant": "a"}, f.Headers, "the headers arrive as published")
	assert.True(t, in.of(plain.ID)[0].Delivery.ExpiresAt.IsZero(), "no ExpiresAt, none delivered")
}

// testSnooze: a snoozed delivery (the error form from an AckOnSuccess
// handler, and Delivery.Snooze from an AckManual one) comes back after
// its delay with the same Attempt, and a snooze is not a handler error;
// snoozes never reach max deliveries. A custom backend proves its
// backend.Snoozer; one without it counts the snooze as a nack.
func testSnooze(t *testing.T, s *suite) {
	h := s.newHarness(t)
	if !h.snoozes() {
		t.Skipf("%s subscriptions do not implement backend.Snoozer: a snooze counts as an attempt there", s.caps.Name)
	}
	topic := h.topic("snooze")
	after := 4 * s.ackTimeout() / 10
	const snoozes = 3
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if len(in.of(d.ID)) <= snoozes {
			return bus.Snooze(after)
		}
		return nil
	}), bus.WithGroup(h.group("snooze-success")), bus.WithAckTimeout(s.longLease()), bus.WithMaxDeliveries(2))
	manual := &inbox{}
	h.subscribe(context.Background(), topic, manual.handle(func(ctx context.Context, d *bus.Delivery) error {
		if len(manual.of(d.ID)) == 1 {
			return d.Snooze(ctx, after)
		}
		return d.Ack(ctx)
	}), bus.WithGroup(h.group("snooze-manual")), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(s.longLease()))
	m := &bus.Message{Payload: []byte("not yet")}
	h.publish(topic, m)
	s.eventually(t, func() bool { return len(in.of(m.ID)) > snoozes && len(manual.of(m.ID)) >= 2 }, "the snoozed deliveries come back")
	for name, got := range map[string][]received{"on-success": in.of(m.ID), "manual": manual.of(m.ID)} {
		for i := 1; i < len(got); i++ {
			assert.GreaterOrEqual(t, got[i].At.Sub(got[i-1].At), after, "%s: delivery %d came after the snooze's delay", name, i+1)
		}
		for i, d := range got {
			assert.Equal(t, 1, d.Attempt, "%s: delivery %d: a snooze does not count an attempt", name, i+1)
		}
	}
	assert.Len(t, in.of(m.ID), snoozes+1, "snoozed %d times past max deliveries 2, then handled once", snoozes)
	assert.Empty(t, h.events.scope(observer.ScopeHandler), "a snooze is not a handler error")
	assert.Empty(t, h.events.scope(observer.ScopeDeadLetter), "snoozes never reach max deliveries")
}

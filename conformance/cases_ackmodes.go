package conformance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// errHandler is the error handlers of the suite fail with.
var errHandler = errors.New("conformance: handler failure")

// fastRetry retries failed messages after 10ms, so retry cases do not wait
// for the default backoff.
func fastRetry() bus.SubscribeOption {
	return bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(10 * time.Millisecond) })
}

// testAckOnReceive: the delivery is acked before the handler runs; a
// handler error goes to the observer and the message is not redelivered.
func testAckOnReceive(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("onreceive"), h.group("onreceive")
	in := &inbox{}
	outcomes := make(chan bus.Outcome, 8)
	ackErrs := make(chan error, 8)
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		trySend(outcomes, d.Outcome())
		trySend(ackErrs, d.Ack(ctx))
		return errHandler
	}), bus.WithGroup(group), bus.WithAckMode(bus.AckOnReceive), bus.WithAckTimeout(s.ackTimeout()))

	m := &bus.Message{Payload: []byte("at-most-once")}
	h.publish(topic, m)
	require.Equal(t, bus.OutcomeAcked, recv(t, s, outcomes, "the handler to start"),
		"AckOnReceive must ack before the handler runs")
	require.ErrorIs(t, recv(t, s, ackErrs, "the handler's Ack"), bus.ErrAlreadySettled,
		"acking an AckOnReceive delivery again must say it is already settled")
	s.eventually(t, func() bool {
		return h.events.has(func(e observer.Event) bool {
			return e.Scope == observer.ScopeHandler && e.MessageID == m.ID && errors.Is(e.Err, errHandler)
		})
	}, "the handler error should reach the observer with ScopeHandler")
	s.never(t, s.quiet(), func() bool { return in.len() > 1 },
		"an AckOnReceive message is never redelivered, even when its handler fails")
	assert.False(t, h.events.has(forMessage(observer.ScopeDeadLetter, m.ID)),
		"an AckOnReceive failure is not dead-lettered")
}

// testAckOnSuccess: a nil return acks (no redelivery); an error retries;
// the handler's ctx has no deadline by default.
func testAckOnSuccess(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("onsuccess"), h.group("onsuccess")
	ok := &bus.Message{Payload: []byte("fine")}
	flaky := &bus.Message{Payload: []byte("fails once")}
	in := &inbox{}
	settled := make(chan bus.Outcome, 8)
	var mu sync.Mutex
	deadlines := 0
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if _, has := ctx.Deadline(); has {
			mu.Lock()
			deadlines++
			mu.Unlock()
		}
		if d.ID == ok.ID {
			d.OnSettle(func(o bus.Outcome, _ error) { trySend(settled, o) })
			return nil
		}
		if d.Attempt == 1 && s.caps.Redelivery {
			return errHandler
		}
		return nil
	}), bus.WithGroup(group), bus.WithAckTimeout(s.ackTimeout()), fastRetry())

	h.publish(topic, ok, flaky)
	require.Equal(t, bus.OutcomeAcked, recv(t, s, settled, "the settlement of the successful message"),
		"a nil handler return must ack")
	if s.caps.Redelivery {
		s.eventually(t, func() bool { return len(in.of(flaky.ID)) >= 2 }, "a handler error should cause a redelivery")
		assert.Equal(t, []int{1, 2}, in.attempts(flaky.ID)[:2], "the retry comes with Attempt 2")
	}
	s.never(t, s.quiet(), func() bool { return len(in.of(ok.ID)) > 1 || len(in.of(flaky.ID)) > 2 },
		"an acked message must not be redelivered")
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, deadlines, "a handler's ctx has no deadline unless WithHandlerTimeout sets one")
}

// testAckManual: the handler settles, possibly from another goroutine; an
// unsettled delivery keeps its in-flight slot after the handler returned.
func testAckManual(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("manual")
	lease := s.cfg.dur(time.Second)
	held := make(chan *bus.Delivery, 8)
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(func(_ context.Context, d *bus.Delivery) error {
		trySend(held, d) // settled later, by the test goroutine
		return nil
	}), bus.WithGroup(h.group("manual")), bus.WithAckMode(bus.AckManual), bus.WithMaxInFlight(1), bus.WithAckTimeout(lease))

	h.publish(topic, &bus.Message{Payload: []byte("one")}, &bus.Message{Payload: []byte("two")})
	d1 := recv(t, s, held, "the first manual delivery")
	s.never(t, lease*3/10, func() bool { return in.len() > 1 },
		"with one slot, an unsettled manual delivery keeps the slot after its handler returned")
	require.Equal(t, bus.OutcomePending, d1.Outcome(), "the handler did not settle the delivery")

	errc := make(chan error, 1)
	go func() { errc <- d1.Ack(context.Background()) }()
	require.NoError(t, recv(t, s, errc, "Ack from another goroutine"), "a manual delivery may be acked from another goroutine")
	d2 := recv(t, s, held, "the second delivery once the slot is free")
	require.NotEqual(t, d1.ID, d2.ID, "the second message takes the freed slot")
	require.NoError(t, d2.Ack(context.Background()), "ack the second delivery")
	assert.Equal(t, bus.OutcomeAcked, d1.Outcome(), "first delivery outcome")
	if s.caps.Redelivery {
		s.never(t, lease*3/2, func() bool { return in.len() > 2 }, "acked manual deliveries must not be redelivered")
	}
}

// testSettleTwice: the first settlement wins; later ones, even
// concurrent, return ErrAlreadySettled.
func testSettleTwice(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("settle")
	held := make(chan *bus.Delivery, 8)
	h.subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		trySend(held, d)
		return nil
	}, bus.WithGroup(h.group("settle")), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(s.longLease()))

	h.publish(topic, &bus.Message{Payload: []byte("a")}, &bus.Message{Payload: []byte("b")})
	ctx := context.Background()
	d1 := recv(t, s, held, "the first delivery")
	require.NoError(t, d1.Ack(ctx), "the first settlement succeeds")
	require.ErrorIs(t, d1.Ack(ctx), bus.ErrAlreadySettled, "second Ack")
	require.ErrorIs(t, d1.Reject(ctx, errHandler), bus.ErrAlreadySettled, "Reject after Ack")
	require.ErrorIs(t, d1.Extend(ctx), bus.ErrAlreadySettled, "Extend after Ack")
	if s.caps.Redelivery {
		require.ErrorIs(t, d1.Nack(ctx, 0), bus.ErrAlreadySettled, "Nack after Ack")
	} else {
		require.ErrorIs(t, d1.Nack(ctx, 0), bus.ErrUnsupported, "Nack on a backend without redelivery")
	}
	require.Equal(t, bus.OutcomeAcked, d1.Outcome(), "the first settlement decides the outcome")

	d2 := recv(t, s, held, "the second delivery")
	const racers = 8
	start := make(chan struct{})
	errs := make(chan error, racers)
	for range racers {
		go func() {
			<-start
			errs <- d2.Ack(ctx)
		}()
	}
	close(start)
	wins := 0
	for range racers {
		err := recv(t, s, errs, "a concurrent Ack")
		if err == nil {
			wins++
			continue
		}
		require.ErrorIs(t, err, bus.ErrAlreadySettled, "a losing concurrent Ack")
	}
	require.Equal(t, 1, wins, "exactly one of %d concurrent Acks wins", racers)
}

// testNackRedelivers: Nack hands the message back with Attempt+1.
func testNackRedelivers(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("nack")
	in := &inbox{}
	nackErr := make(chan error, 1)
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt == 1 {
			trySend(nackErr, d.Nack(ctx, 0))
			return nil
		}
		return d.Ack(ctx)
	}), bus.WithGroup(h.group("nack")), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(s.longLease()))

	m := &bus.Message{Payload: []byte("nack me")}
	h.publish(topic, m)
	require.NoError(t, recv(t, s, nackErr, "the Nack"), "Nack succeeds")
	s.eventually(t, func() bool { return len(in.of(m.ID)) >= 2 }, "a nacked message is redelivered")
	s.never(t, s.ackTimeout(), func() bool { return len(in.of(m.ID)) > 2 }, "the acked redelivery is final")
	got := in.of(m.ID)
	assert.Equal(t, []int{1, 2}, in.attempts(m.ID), "Attempt grows by one per delivery")
	assert.Equal(t, m.Payload, got[1].Payload, "the redelivery carries the same payload")
	assert.Equal(t, bus.OutcomeNacked, got[0].Delivery.Outcome(), "the first delivery's outcome")
}

// testNackDelay: a nacked message is not redelivered before its delay.
func testNackDelay(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("nackdelay")
	delay := s.cfg.dur(600 * time.Millisecond)
	in := &inbox{}
	nackedAt := make(chan time.Time, 1)
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt == 1 {
			now := time.Now()
			if err := d.Nack(ctx, delay); err != nil {
				return err
			}
			trySend(nackedAt, now)
			return nil
		}
		return d.Ack(ctx)
	}), bus.WithGroup(h.group("nackdelay")), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(s.longLease()))

	m := &bus.Message{Payload: []byte("later")}
	h.publish(topic, m)
	at := recv(t, s, nackedAt, "the delayed Nack")
	s.eventually(t, func() bool { return len(in.of(m.ID)) >= 2 }, "the nacked message comes back after its delay")
	second := in.of(m.ID)[1]
	const tolerance = 10 * time.Millisecond // clock granularity of brokers
	assert.GreaterOrEqual(t, second.At.Sub(at), delay-tolerance,
		"redelivered %v after a Nack with delay %v", second.At.Sub(at), delay)
	assert.Equal(t, 2, second.Attempt, "the delayed redelivery is attempt 2")
}

// testAckTimeoutRedelivery: an unsettled manual delivery comes back after
// the ack timeout with Attempt 2; the expired delivery can no longer be
// settled.
func testAckTimeoutRedelivery(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("lease")
	lease := s.ackTimeout()
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt == 1 {
			return nil // forget to settle
		}
		return d.Ack(ctx)
	}), bus.WithGroup(h.group("lease")), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(lease))

	m := &bus.Message{Payload: []byte("forgotten")}
	published := time.Now() // the lease starts after this
	h.publish(topic, m)
	s.eventually(t, func() bool { return len(in.of(m.ID)) >= 2 }, "an unsettled delivery is redelivered after the ack timeout")
	got := in.of(m.ID)
	assert.Equal(t, 2, got[1].Attempt, "the redelivery is attempt 2")
	const tolerance = 10 * time.Millisecond // clock granularity of brokers
	assert.GreaterOrEqual(t, got[1].At.Sub(published), lease-tolerance,
		"not redelivered before the ack timeout of %v", lease)
	s.eventually(t, func() bool { return got[0].Delivery.Outcome() == bus.OutcomeLeaseLost },
		"the first delivery's lease expires")
	assert.ErrorIs(t, got[0].Delivery.Ack(context.Background()), bus.ErrAlreadySettled,
		"an expired delivery cannot be acked any more")
	s.eventually(t, func() bool { return h.events.has(forMessage(observer.ScopeLease, m.ID)) },
		"the lease that ran out is reported to the observer")
	s.never(t, s.quiet(), func() bool { return len(in.of(m.ID)) > 2 }, "the acked redelivery is final")
}

// testExtend: Extend keeps a slow manual delivery from being redelivered.
func testExtend(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("extend")
	lease := s.ackTimeout()
	in := &inbox{}
	done := make(chan []error, 1)
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt > 1 {
			return nil // a redelivery: the test fails below
		}
		// Slow work for three leases, extending four times per lease.
		var errs []error
		tick := time.NewTicker(lease / 4)
		defer tick.Stop()
		end := time.After(3 * lease)
	work:
		for {
			select {
			case <-tick.C:
				if err := d.Extend(ctx); err != nil {
					errs = append(errs, err)
				}
			case <-end:
				break work
			}
		}
		errs = append(errs, d.Ack(ctx))
		trySend(done, errs)
		return nil
	}), bus.WithGroup(h.group("extend")), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(lease))

	m := &bus.Message{Payload: []byte("slow")}
	h.publish(topic, m)
	for _, err := range recv(t, s, done, "the slow handler") {
		require.NoError(t, err, "Extend and the final Ack succeed")
	}
	s.never(t, s.quiet(), func() bool { return in.len() > 1 }, "an extended delivery is not redelivered")
	assert.Equal(t, []int{1}, in.attempts(m.ID), "a single delivery")
}

// testHandlerTimeout: a handler that outlives WithHandlerTimeout counts as
// failed, even if it returns nil, and the message is retried.
func testHandlerTimeout(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("htimeout"), h.group("htimeout")
	timeout := s.cfg.dur(100 * time.Millisecond)
	in := &inbox{}
	hadDeadline := make(chan bool, 1)
	h.subscribe(context.Background(), topic, in.handle(func(ctx context.Context, d *bus.Delivery) error {
		if d.Attempt > 1 {
			return nil
		}
		_, has := ctx.Deadline()
		trySend(hadDeadline, has)
		select {
		case <-ctx.Done():
		case <-time.After(s.deadline()):
		}
		return nil // too late: the timeout decides
	}), bus.WithGroup(group), bus.WithHandlerTimeout(timeout), bus.WithAckTimeout(s.longLease()), fastRetry())

	m := &bus.Message{Payload: []byte("slow")}
	h.publish(topic, m)
	require.True(t, recv(t, s, hadDeadline, "the first handler call"), "WithHandlerTimeout gives the handler's ctx a deadline")
	s.eventually(t, func() bool { return len(in.of(m.ID)) >= 2 }, "a timed-out handler's message is retried")
	assert.Equal(t, []int{1, 2}, in.attempts(m.ID)[:2], "the retry is attempt 2")
	e, ok := h.events.find(forMessage(observer.ScopeHandler, m.ID))
	require.True(t, ok, "the timeout is reported to the observer with ScopeHandler")
	assert.ErrorIs(t, e.Err, context.DeadlineExceeded, "the reported error is the deadline")
	assert.Equal(t, 1, e.Attempt, "reported for attempt 1")
	assert.Equal(t, group, e.Group, "reported with the group")
}

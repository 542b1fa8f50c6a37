package conformance

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// testUnrepresentableTimesRefused: a DeliverAt or ExpiresAt outside the
// times every backend carries (int64 nanoseconds since the Unix epoch)
// is refused before any I/O with an error that names the field, and the
// last time inside the range arrives exactly.
func testUnrepresentableTimesRefused(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("times-bad")
	last := time.UnixMilli(math.MaxInt64 / int64(time.Millisecond))
	tests := []struct {
		name, field string
		m           *bus.Message
	}{
		{"DeliverAt 2^62 s", "DeliverAt", &bus.Message{DeliverAt: time.Unix(1<<62, 0)}},
		{"ExpiresAt 2^62 s", "ExpiresAt", &bus.Message{ExpiresAt: time.Unix(1<<62, 0)}},
		{"DeliverAt past the last", "DeliverAt", &bus.Message{DeliverAt: last.Add(time.Millisecond)}},
		{"ExpiresAt past the last", "ExpiresAt", &bus.Message{ExpiresAt: last.Add(time.Millisecond)}},
		{"ExpiresAt -2^62 s", "ExpiresAt", &bus.Message{ExpiresAt: time.Unix(-1<<62, 0)}},
	}
	for _, tt := range tests {
		err := h.bus.Publish(context.Background(), topic, tt.m)
		require.ErrorIs(t, err, bus.ErrInvalidMessage, "%s is refused", tt.name)
		assert.Contains(t, err.Error(), tt.field, "%s: the error names the field", tt.name)
	}
	assert.Zero(t, h.be.publishes.Load(), "nothing reached the backend")

	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil), bus.WithGroup(h.group("times-bad")), bus.WithAckTimeout(s.longLease()))
	m := &bus.Message{Payload: []byte("the last time"), ExpiresAt: last}
	h.publish(topic, m)
	s.eventually(t, func() bool { return len(in.of(m.ID)) == 1 }, "a message expiring at the last carried time arrives")
	assert.True(t, last.Equal(in.of(m.ID)[0].Delivery.ExpiresAt), "ExpiresAt arrives exactly: %v, want %v", in.of(m.ID)[0].Delivery.ExpiresAt, last)
}

// testHugeDelaysWait: a nack, a snooze, a returned bus.Nack or a retry backoff
// asking for math.MaxInt64 (longer than any broker carries) waits: the
// bus cuts it to 100 years, so none comes back, as one whose due time
// wrapped around would at once.
func testHugeDelaysWait(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("hugedelay")
	const forever = time.Duration(math.MaxInt64)
	var mu sync.Mutex
	var settleErrs []error
	onSuccess := &inbox{}
	h.subscribe(context.Background(), topic, onSuccess.handle(func(ctx context.Context, d *bus.Delivery) error {
		switch string(d.Payload) {
		case "retry-after":
			return bus.Nack(errors.New("come back much later"), forever)
		case "backoff":
			return errors.New("failed: the backoff says much later")
		case "snooze-error":
			return bus.Snooze(forever)
		}
		return nil
	}), bus.WithGroup(h.group("hugedelay-success")), bus.WithAckTimeout(s.longLease()),
		bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(forever) }))
	manual := &inbox{}
	h.subscribe(context.Background(), topic, manual.handle(func(ctx context.Context, d *bus.Delivery) error {
		var err error
		switch string(d.Payload) {
		case "nack":
			err = d.Nack(ctx, forever)
		case "snooze":
			err = d.Snooze(ctx, forever)
		default:
			err = d.Ack(ctx)
		}
		mu.Lock()
		settleErrs = append(settleErrs, err)
		mu.Unlock()
		return nil
	}), bus.WithGroup(h.group("hugedelay-manual")), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(s.longLease()))
	var msgs []*bus.Message
	for _, p := range []string{"retry-after", "backoff", "snooze-error", "nack", "snooze"} {
		msgs = append(msgs, &bus.Message{Payload: []byte(p)})
	}
	h.publish(topic, msgs...)
	s.eventually(t, func() bool { return onSuccess.distinct() == len(msgs) && manual.distinct() == len(msgs) }, "every message is handled once in each group")
	s.never(t, s.quiet(), func() bool { return onSuccess.len() > len(msgs) || manual.len() > len(msgs) },
		"a delivery delayed by math.MaxInt64 comes back")
	mu.Lock()
	defer mu.Unlock()
	for i, err := range settleErrs {
		assert.NoError(t, err, "settlement %d: a huge delay is cut, not refused", i)
	}
	assert.Empty(t, h.events.scope(observer.ScopeDeadLetter), "nothing dead-lettered")
}

// testSnoozeWithoutDelay: Delivery.Snooze with a delay of 0 or less is
// refused with ErrInvalidOption and leaves the delivery unsettled, and a
// handler that returns bus.Snooze(0) fails like any other, counted: the
// message is tried max deliveries times and dead-lettered, never handed
// back again and again without counting.
func testSnoozeWithoutDelay(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("snooze-zero")
	dlq := h.deadLetterReader(topic + ".dlq")
	var mu sync.Mutex
	var refused []error
	var acked []error
	manual := &inbox{}
	h.subscribe(context.Background(), topic, manual.handle(func(ctx context.Context, d *bus.Delivery) error {
		zero, negative := d.Snooze(ctx, 0), d.Snooze(ctx, -time.Second)
		ack := d.Ack(ctx)
		mu.Lock()
		refused = append(refused, zero, negative)
		acked = append(acked, ack)
		mu.Unlock()
		return nil
	}), bus.WithGroup(h.group("snooze-zero-manual")), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(s.longLease()))
	const maxDeliveries = 3
	onSuccess := &inbox{}
	h.subscribe(context.Background(), topic, onSuccess.handle(func(context.Context, *bus.Delivery) error {
		return bus.Snooze(0)
	}), bus.WithGroup(h.group("snooze-zero-success")), bus.WithMaxDeliveries(maxDeliveries), bus.WithAckTimeout(s.longLease()), fastRetry())
	m := &bus.Message{Payload: []byte("no delay")}
	h.publish(topic, m)
	s.eventually(t, func() bool { return dlq.len() >= 1 && len(manual.of(m.ID)) >= 1 }, "dead-lettered after max deliveries; handled in the manual group")
	s.never(t, s.quiet(), func() bool { return len(onSuccess.of(m.ID)) > maxDeliveries || len(manual.of(m.ID)) > 1 },
		"a snooze without delay comes back past max deliveries, or an acked delivery comes back")
	assert.Equal(t, []int{1, 2, 3}, onSuccess.attempts(m.ID), "bus.Snooze(0) fails and counts")
	assert.Equal(t, string(backend.CodeMaxDeliveries), dlq.all()[0].Headers[backend.HeaderDeadLetterCode], "dead-lettered for max deliveries")
	handlerErrs := h.events.scope(observer.ScopeHandler)
	require.Len(t, handlerErrs, maxDeliveries, "each attempt is reported as a failure")
	assert.Contains(t, handlerErrs[0].Err.Error(), "not positive", "the report says why it is no snooze")
	mu.Lock()
	defer mu.Unlock()
	for _, err := range refused {
		assert.ErrorIs(t, err, bus.ErrInvalidOption, "Delivery.Snooze without a positive delay is refused")
	}
	for _, err := range acked {
		assert.NoError(t, err, "the refused snooze left the delivery unsettled: the ack settles it")
	}
}

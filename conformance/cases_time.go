package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// testDeliverAt: a message published with a DeliverAt is never handled
// before it, while a message published after it without one goes ahead;
// it arrives with its DeliverAt, its headers as published and Attempt 1
// (given back uncounted where it came early), and a subscriber closed
// before it was due does not lose it: the next one gets it.
func testDeliverAt(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("deliverat"), h.group("deliverat")
	// The ack timeout bounds how long a delivery in flight to the member
	// that closes (a broker may have sent it already) takes to come back.
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithAckTimeout(s.ackTimeout())}
	first := &inbox{}
	sub := h.subscribe(context.Background(), topic, first.handle(nil), opts...)
	wait := s.cfg.dur(300 * time.Millisecond)
	soon := &bus.Message{Payload: []byte("soon"), Headers: map[string]string{"tenant": "a"}, DeliverAt: time.Now().Add(wait)}
	now := &bus.Message{Payload: []byte("now")}
	h.publish(topic, soon, now)
	s.eventually(t, func() bool { return len(first.of(now.ID)) == 1 }, "the message without DeliverAt goes ahead")
	s.eventually(t, func() bool { return len(first.of(soon.ID)) == 1 }, "the scheduled message arrives")
	got := first.of(soon.ID)[0]
	due := soon.DeliverAt.Truncate(time.Millisecond)
	assert.False(t, got.At.Before(due), "handled at %v, before its DeliverAt %v", got.At, due)
	assert.True(t, due.Equal(got.Delivery.DeliverAt), "DeliverAt arrives: %v, want %v", got.Delivery.DeliverAt, due)
	assert.Equal(t, map[string]string{"tenant": "a"}, got.Headers, "the headers arrive as published")
	if h.snoozes() || s.caps.Scheduling {
		assert.Equal(t, 1, got.Attempt, "an early delivery given back does not count")
	}

	// A subscriber that closes before the message is due does not take it
	// along.
	later := &bus.Message{Payload: []byte("later"), DeliverAt: time.Now().Add(wait)}
	h.publish(topic, later)
	h.closeSub(sub)
	assert.Empty(t, first.of(later.ID), "not handled before it was due")
	second := &inbox{}
	h.subscribe(context.Background(), topic, second.handle(nil), opts...)
	s.eventually(t, func() bool { return len(second.of(later.ID)) == 1 }, "the next subscriber gets the scheduled message")
	assert.False(t, second.of(later.ID)[0].At.Before(later.DeliverAt.Truncate(time.Millisecond)), "not before its DeliverAt")
	assert.Empty(t, h.events.scope(observer.ScopeDeadLetter), "nothing dead-lettered")
}

// testDeliverAtRejected: a DeliverAt at or after ExpiresAt is refused
// before any I/O, and so is any DeliverAt on a backend that can neither
// hold a message nor give an early delivery back (it would arrive early).
func testDeliverAtRejected(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("deliverat-bad")
	at := time.Now().Add(time.Hour)
	err := h.bus.Publish(context.Background(), topic, &bus.Message{Payload: []byte("x"), DeliverAt: at, ExpiresAt: at})
	require.ErrorIs(t, err, bus.ErrInvalidMessage)
	if !s.caps.Scheduling && !s.caps.Redelivery {
		err = h.bus.Publish(context.Background(), topic, &bus.Message{Payload: []byte("x"), DeliverAt: at})
		require.ErrorIs(t, err, bus.ErrUnsupported)
	}
	assert.Zero(t, h.be.publishes.Load(), "nothing reached the backend")
}

// testPublishDedup: a message whose caller-set ID was already published
// to the topic within the dedup window is stored once and the second
// Publish returns nil, also within one batch, beside messages whose IDs
// the bus generates (each stored), and for a Publish retried after its
// ctx ran out mid-call (whatever part of it reached the broker); another
// topic does not share the window.
func testPublishDedup(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, other := h.topic("dedup"), h.topic("dedup-other")
	in, elsewhere := &inbox{}, &inbox{}
	opts := []bus.SubscribeOption{bus.WithGroup(h.group("dedup")), bus.WithAckTimeout(s.longLease())}
	h.subscribe(context.Background(), topic, in.handle(nil), opts...)
	h.subscribe(context.Background(), other, elsewhere.handle(nil), opts...)

	once := &bus.Message{ID: "order-7-" + uniqueSuffix(), Payload: []byte("first")}
	h.publish(topic, once)
	h.publish(topic, &bus.Message{ID: once.ID, Payload: []byte("again")})
	twice := &bus.Message{ID: "pair-" + uniqueSuffix(), Payload: []byte("pair")}
	h.publish(topic, twice, &bus.Message{ID: twice.ID, Payload: []byte("pair")})
	h.publish(other, &bus.Message{ID: once.ID, Payload: []byte("first")})
	mixed := []*bus.Message{{Payload: []byte("generated")}, {ID: once.ID, Payload: []byte("again")}, {Payload: []byte("generated")}}
	h.publish(topic, mixed...)
	want := []*bus.Message{once, twice, mixed[0], mixed[2]}

	// Retries after a ctx that ran out: each message is published with
	// a deadline that may end before, during or after the call, then
	// again with a good ctx, as a caller that saw the timeout would.
	for i, d := range []time.Duration{0, 20 * time.Microsecond, 100 * time.Microsecond, 500 * time.Microsecond, 2 * time.Millisecond} {
		m := &bus.Message{ID: fmt.Sprintf("retry-%d-%s", i, uniqueSuffix()), Payload: []byte("retried")}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		_ = h.bus.Publish(ctx, topic, m) // a timeout here is what the retry is for
		cancel()
		h.publish(topic, &bus.Message{ID: m.ID, Payload: m.Payload})
		want = append(want, m)
	}
	s.eventually(t, func() bool { return in.distinct() == len(want) && elsewhere.len() == 1 }, "every distinct message arrives")
	s.never(t, s.quiet(), func() bool { return in.len() > len(want) }, "a duplicate arrives")
	requireExactlyOnce(t, in, want, "dedup")
	assert.Equal(t, []byte("first"), in.of(once.ID)[0].Payload, "the first publish is the one stored")
}

// testDelayedNeverHoldBackImmediate: messages whose DeliverAt lies ahead
// never slow the messages published without one: after many delayed
// messages, a subscription that starts and the messages published right
// after it arrive as fast as in a topic without delayed messages.
func testDelayedNeverHoldBackImmediate(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("delayed-immediate"), h.group("delayed-immediate")
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithAckTimeout(s.longLease())}
	// The group exists before the delayed messages: they lie after its
	// cursor.
	h.closeSub(h.subscribe(context.Background(), topic, func(context.Context, *bus.Delivery) error { return nil }, opts...))

	at := time.Now().Add(2 * s.longLease())
	delayed := make([]*bus.Message, count(2000, 500))
	for i := range delayed {
		delayed[i] = &bus.Message{Payload: fmt.Appendf(nil, "later-%d", i), DeliverAt: at}
	}
	for start := 0; start < len(delayed); start += 250 {
		h.publish(topic, delayed[start:min(start+250, len(delayed))]...)
	}

	// measure returns how long the n messages published after a new
	// subscription of the group took to arrive.
	in := &inbox{}
	sub := h.subscribe(context.Background(), topic, in.handle(nil), opts...)
	start := time.Now()
	now := numbered("now", 10)
	h.publish(topic, now...)
	s.eventually(t, func() bool { return in.distinct() >= len(now) }, "the immediate messages arrive")
	took := time.Since(start)
	h.closeSub(sub)
	for _, m := range now {
		assert.Len(t, in.of(m.ID), 1, "%s handled once", m.Payload)
	}
	t.Logf("%d delayed messages ahead: %d immediate messages arrived in %v", len(delayed), len(now), took.Round(time.Millisecond))
	assert.Less(t, took, s.cfg.dur(delayedBound), "delayed messages held back the immediate ones")
}

// delayedBound bounds the arrival of immediate messages behind delayed
// ones: far above the tens of milliseconds they take, far below the
// second a backend that waits behind the delayed messages takes.
const delayedBound = 750 * time.Millisecond

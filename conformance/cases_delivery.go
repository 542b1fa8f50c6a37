package conformance

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// testRoundTrip: ID, key, unicode headers, every byte value in the payload,
// and PublishedAt survive the trip; an empty ID is assigned by Publish.
func testRoundTrip(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("roundtrip"), h.group("rt")
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil), bus.WithGroup(group), bus.WithAckTimeout(s.longLease()))

	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte(i)
	}
	full := &bus.Message{
		ID:  "conf-id-" + uniqueSuffix(),
		Key: "clé-🔑-キー",
		Headers: map[string]string{
			"x-greeting":   "héllo wörld, 世界 🚀",
			"content-type": "application/octet-stream",
			"X-Mixed-Case": "Value With Spaces\tand a tab",
			"x-empty":      "",
		},
		Payload: payload,
	}
	bare := &bus.Message{}
	before := time.Now()
	h.publish(topic, full, bare)
	after := time.Now()
	require.NotEmpty(t, bare.ID, "Publish must assign an ID to a message without one")
	require.NotEqual(t, full.ID, bare.ID, "an assigned ID must be unique")

	s.eventually(t, func() bool { return in.distinct() >= 2 }, "both messages should be delivered")
	got := in.of(full.ID)
	require.Len(t, got, 1, "the full message should be delivered once, by its ID %q", full.ID)
	r := got[0]
	assert.Equal(t, full.Key, r.Key, "key")
	assert.Equal(t, full.Headers, r.Headers, "headers must round-trip exactly, with no backend headers added")
	assert.Equal(t, payload, r.Payload, "payload with all 256 byte values")
	assert.Equal(t, topic, r.Topic, "delivery topic")
	assert.Equal(t, group, r.Group, "delivery group")
	assert.Equal(t, 1, r.Attempt, "first delivery is attempt 1")
	require.False(t, r.PublishedAt.IsZero(), "PublishedAt must be set")
	assert.WithinRange(t, r.PublishedAt, before.Add(-time.Second), after.Add(time.Second),
		"PublishedAt is when the bus accepted the message (±1s for storage precision)")

	got = in.of(bare.ID)
	require.Len(t, got, 1, "the bare message should be delivered once, by its assigned ID %q", bare.ID)
	assert.Empty(t, got[0].Payload, "empty payload stays empty")
	assert.Empty(t, got[0].Headers, "no headers were set")
	assert.Empty(t, got[0].Key, "no key was set")
}

// testTopicIsolation: a subscriber only sees its own topic.
func testTopicIsolation(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topicA, topicB := h.topic("iso-a"), h.topic("iso-b")
	inA, inB := &inbox{}, &inbox{}
	opts := []bus.SubscribeOption{bus.WithGroup(h.group("iso")), bus.WithAckTimeout(s.longLease())}
	h.subscribe(context.Background(), topicA, inA.handle(nil), opts...)
	h.subscribe(context.Background(), topicB, inB.handle(nil), opts...)

	n := count(20, 5)
	msgsB := h.publishN(topicB, "b", n)
	msgsA := h.publishN(topicA, "a", n)
	s.eventually(t, func() bool { return inA.distinct() >= n && inB.distinct() >= n },
		"each topic's subscriber should get its %d messages", n)
	// A stray delivery across topics would arrive with the others; give it
	// a short window.
	s.never(t, s.ackTimeout(), func() bool { return inA.len() > n || inB.len() > n }, "no extra deliveries")
	requireExactlyOnce(t, inA, msgsA, "subscriber of topic A")
	requireExactlyOnce(t, inB, msgsB, "subscriber of topic B")
}

// testConcurrentPublishersNoLoss: 5,000 messages from 50 goroutines all
// arrive, once each.
func testConcurrentPublishersNoLoss(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("concurrent")
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil),
		bus.WithGroup(h.group("conc")), bus.WithAckTimeout(s.longLease()), bus.WithMaxInFlight(256))

	publishers, each := count(50, 10), count(100, 20)
	total := publishers * each
	all := make([][]*bus.Message, publishers)
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	for p := range publishers {
		all[p] = numbered("p"+strconv.Itoa(p), each)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A watchdog, not a figure: a publisher's messages go one
			// after the other, beside all the others.
			ctx, cancel := context.WithTimeout(context.Background(), 3*s.deadline())
			defer cancel()
			for _, m := range all[p] {
				if err := h.bus.Publish(ctx, topic, m); err != nil {
					errs <- fmt.Errorf("publisher %d: %w", p, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "every concurrent Publish should succeed")
	}
	var want []*bus.Message
	for _, ms := range all {
		want = append(want, ms...)
	}
	require.Eventually(t, func() bool { return in.distinct() >= total }, 3*s.deadline(), pollInterval,
		"all %d messages from %d publishers should arrive", total, publishers)
	requireExactlyOnce(t, in, want, "single subscriber")
}

// testConsumerGroupSharesLoad: two members of one group share the
// messages and each message is handled once by the group.
func testConsumerGroupSharesLoad(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("group"), h.group("shared")
	in := &inbox{}
	var perMember [2]atomic.Int64
	for i := range perMember {
		h.subscribe(context.Background(), topic, in.handle(func(context.Context, *bus.Delivery) error {
			perMember[i].Add(1)
			time.Sleep(time.Millisecond) // a little work, so both members get a turn
			return nil
		}), bus.WithGroup(group), bus.WithMaxInFlight(4), bus.WithAckTimeout(s.longLease()))
	}

	n := count(300, 60)
	msgs := h.publishN(topic, "m", n)
	s.eventually(t, func() bool { return in.distinct() >= n }, "the group should handle all %d messages", n)
	s.never(t, s.ackTimeout(), func() bool { return in.len() > n }, "no message handled twice by the group")
	requireExactlyOnce(t, in, msgs, "consumer group")
	a, b := perMember[0].Load(), perMember[1].Load()
	t.Logf("load split between the two members: %d / %d", a, b)
	assert.Positive(t, a, "member 1 should handle part of the load")
	assert.Positive(t, b, "member 2 should handle part of the load")
}

// testTwoGroupsEachGetEveryMessage: fan-out across groups.
func testTwoGroupsEachGetEveryMessage(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("fanout")
	in1, in2 := &inbox{}, &inbox{}
	h.subscribe(context.Background(), topic, in1.handle(nil), bus.WithGroup(h.group("one")), bus.WithAckTimeout(s.longLease()))
	h.subscribe(context.Background(), topic, in2.handle(nil), bus.WithGroup(h.group("two")), bus.WithAckTimeout(s.longLease()))

	n := count(100, 30)
	msgs := h.publishN(topic, "m", n)
	s.eventually(t, func() bool { return in1.distinct() >= n && in2.distinct() >= n },
		"both groups should get all %d messages", n)
	s.never(t, s.ackTimeout(), func() bool { return in1.len() > n || in2.len() > n }, "no duplicates in either group")
	requireExactlyOnce(t, in1, msgs, "group one")
	requireExactlyOnce(t, in2, msgs, "group two")
}

// testOrdering: a single consumer with one slot sees first deliveries in
// publish order, for single and batched publishes.
func testOrdering(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("order")
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil),
		bus.WithGroup(h.group("order")), bus.WithMaxInFlight(1), bus.WithAckTimeout(s.longLease()))

	n := count(200, 50)
	msgs := numbered("o", n)
	half := n / 2
	for _, m := range msgs[:half] {
		h.publish(topic, m)
	}
	for start := half; start < n; start += 10 {
		h.publish(topic, msgs[start:min(start+10, n)]...)
	}
	s.eventually(t, func() bool { return in.distinct() >= n }, "all %d messages should arrive", n)
	var order []string
	for _, r := range in.all() {
		if r.Attempt == 1 {
			order = append(order, r.ID)
		}
	}
	want := make([]string, n)
	for i, m := range msgs {
		want[i] = m.ID
	}
	require.Equal(t, want, order, "first deliveries must come in publish order")
}

// testStartFromNewest: a new group created with StartNewest does not see
// what was published before it existed.
func testStartFromNewest(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("newest")
	h.publishN(topic, "old", 3)
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil),
		bus.WithGroup(h.group("newest")), bus.WithStartFrom(backend.StartNewest), bus.WithAckTimeout(s.longLease()))
	fresh := h.publishN(topic, "new", 3)
	s.eventually(t, func() bool { return in.distinct() >= len(fresh) }, "the new messages should arrive")
	s.never(t, s.ackTimeout(), func() bool { return in.len() > len(fresh) }, "no old message for a newest group")
	requireExactlyOnce(t, in, fresh, "newest group")
}

// testStartFromOldest: a new group created with StartOldest sees the
// retained messages; a newest group on the same topic does not; an
// existing group is not moved back by StartOldest.
func testStartFromOldest(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("oldest")
	old := h.publishN(topic, "old", 3)

	oldestGroup := h.group("oldest")
	inOld, inNew := &inbox{}, &inbox{}
	subOld := h.subscribe(context.Background(), topic, inOld.handle(nil),
		bus.WithGroup(oldestGroup), bus.WithStartFrom(backend.StartOldest), bus.WithAckTimeout(s.longLease()))
	h.subscribe(context.Background(), topic, inNew.handle(nil),
		bus.WithGroup(h.group("newest")), bus.WithStartFrom(backend.StartNewest), bus.WithAckTimeout(s.longLease()))
	fresh := h.publishN(topic, "new", 3)

	all := append(append([]*bus.Message(nil), old...), fresh...)
	s.eventually(t, func() bool { return inOld.distinct() >= len(all) && inNew.distinct() >= len(fresh) },
		"oldest group should get all %d, newest group the %d new", len(all), len(fresh))
	s.never(t, s.ackTimeout(), func() bool { return inOld.len() > len(all) || inNew.len() > len(fresh) },
		"no extra deliveries")
	requireExactlyOnce(t, inOld, all, "oldest group")
	requireExactlyOnce(t, inNew, fresh, "newest group")

	if !s.caps.Redelivery {
		return // an at-most-once backend keeps no group position to resume
	}
	// StartOldest matters only when the group is created: rejoining the
	// group resumes where it stands.
	h.closeSub(subOld)
	again := &inbox{}
	h.subscribe(context.Background(), topic, again.handle(nil),
		bus.WithGroup(oldestGroup), bus.WithStartFrom(backend.StartOldest), bus.WithAckTimeout(s.longLease()))
	later := h.publishN(topic, "later", 2)
	s.eventually(t, func() bool { return again.distinct() >= len(later) }, "the rejoined group should get new messages")
	s.never(t, s.ackTimeout(), func() bool { return again.len() > len(later) },
		"a rejoined group must not restart from the oldest message")
	requireExactlyOnce(t, again, later, "rejoined oldest group")
}

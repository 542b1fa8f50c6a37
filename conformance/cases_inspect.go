package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// inspector returns the backend's Inspector or skips the case: Inspector
// is optional.
func (h *harness) inspector(t *testing.T) backend.Inspector {
	t.Helper()
	in, ok := h.be.Backend.(backend.Inspector)
	if !ok {
		t.Skipf("%s does not implement backend.Inspector", h.s.caps.Name)
	}
	return in
}

// topicInfo returns the inspector's figures of topic, which it must list.
func topicInfo(ctx context.Context, t *testing.T, in backend.Inspector, topic string) backend.TopicInfo {
	t.Helper()
	ts, err := in.Topics(ctx)
	require.NoError(t, err)
	for _, ti := range ts {
		if ti.Name == topic {
			return ti
		}
	}
	require.Failf(t, "the topic is not listed", "%q among %v", topic, ts)
	return backend.TopicInfo{}
}

// testInspectorFigures: publish 10, receive 3 and leave them unsettled: the
// group shows lag 7 (or Unknown) and pending 3, and the topic retains 10;
// Peek, where the backend supports it, reads the 10 and changes no group.
// The group starts from the oldest message where the backend can, and
// otherwise exists from Subscribe on, before the publish.
func testInspectorFigures(t *testing.T, s *suite) {
	h := s.newHarness(t)
	in := h.inspector(t)
	topic, group := h.topic("inspect"), h.group("inspect")
	start := backend.StartNewest
	if s.caps.StartOldest {
		start = backend.StartOldest
	}
	block := make(chan struct{})
	started := make(chan struct{}, 10)
	sub := h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		trySend(started, struct{}{})
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil
	}, bus.WithGroup(group), bus.WithMaxInFlight(3), bus.WithAckTimeout(s.longLease()), bus.WithStartFrom(start))
	defer func() {
		close(block)
		h.closeSub(sub)
	}()
	h.publishN(topic, "i", 10)
	for range 3 {
		recv(t, s, started, "three handlers to start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	var gi backend.GroupInfo
	s.eventually(t, func() bool {
		gs, err := in.Groups(ctx, topic)
		if err != nil || len(gs) != 1 {
			return false
		}
		gi = gs[0]
		return gi.Pending == 3
	}, "the group shows 3 pending")
	// The reads below get a deadline of their own: a slow inspector (a
	// management API answering in seconds under load) may have used the
	// first one up while the figures settled.
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	assert.Equal(t, group, gi.Name)
	if gi.Lag.Known() {
		assert.Equal(t, backend.Figure(7), gi.Lag, "7 messages not delivered to the group yet")
	}
	if gi.Consumers.Known() {
		assert.Equal(t, backend.Figure(1), gi.Consumers, "one member")
	}

	ti := topicInfo(ctx, t, in, topic)
	if ti.Messages.Known() {
		assert.Equal(t, backend.Figure(10), ti.Messages, "the topic retains the 10 messages")
	}
	if ti.Published.Known() {
		assert.Equal(t, backend.Figure(10), ti.Published, "10 messages entered the new topic")
	}
	msgs, _, err := in.Peek(ctx, topic, "", 20)
	if errors.Is(err, backend.ErrUnsupported) {
		t.Logf("%s cannot read retained messages (its Inspector's Peek is unsupported): %v", s.caps.Name, err)
	} else {
		require.NoError(t, err)
		assert.Len(t, msgs, 10, "peek reads the retained messages")
	}
	gs, err := in.Groups(ctx, topic)
	require.NoError(t, err)
	require.Len(t, gs, 1)
	assert.Equal(t, backend.Figure(3), gs[0].Pending, "peek changed no group")
}

// testDeadLetterReplayRoundTrip: a rejected message is listed with its
// reason code, replayed to its original topic with its ID, key, payload
// and headers, starts again at attempt 1, and leaves the dead-letter
// topic; purge removes the rest.
func testDeadLetterReplayRoundTrip(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.inspector(t)
	topic, group := h.topic("replay"), h.group("replay")
	dlq := topic + ".dlq"
	fail := make(chan struct{})
	got := make(chan *bus.Delivery, 10)
	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		select {
		case <-fail:
			got <- d
			return nil
		default:
			return bus.Reject(errors.New("bad order"))
		}
	}, bus.WithGroup(group), bus.WithAckTimeout(s.longLease()))
	h.publish(topic,
		&bus.Message{ID: "r-1", Key: "k", Headers: map[string]string{"tenant": "a"}, Payload: []byte("one")},
		&bus.Message{ID: "r-2", Payload: []byte("two")})
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	if _, err := h.bus.DeadLetters(ctx, dlq, 0); errors.Is(err, bus.ErrUnsupported) {
		t.Skipf("%s cannot list retained messages (its Inspector's Peek is unsupported): %v", s.caps.Name, err)
	}
	var dls []bus.DeadLetter
	s.eventually(t, func() bool {
		var err error
		dls, err = h.bus.DeadLetters(ctx, dlq, 0)
		return err == nil && len(dls) == 2
	}, "two dead letters listed")
	for _, d := range dls {
		assert.Equal(t, backend.CodeRejected, d.Code, "%s: reason code", d.ID)
		assert.Equal(t, topic, d.Topic)
		assert.Equal(t, group, d.Group)
	}
	close(fail)
	n, err := h.bus.ReplayDeadLetters(ctx, dlq, "r-1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	d := recv(t, s, got, "the replayed message on its original topic")
	assert.Equal(t, "r-1", d.ID)
	assert.Equal(t, "k", d.Key)
	assert.Equal(t, []byte("one"), d.Payload)
	assert.Equal(t, "a", d.Headers["tenant"])
	assert.Equal(t, 1, d.Attempt, "a replay starts at attempt 1")
	s.eventually(t, func() bool {
		dls, err := h.bus.DeadLetters(ctx, dlq, 0)
		return err == nil && len(dls) == 1 && dls[0].ID == "r-2"
	}, "the replayed message left the dead-letter topic")
	n, err = h.bus.PurgeDeadLetters(ctx, dlq)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	dls, err = h.bus.DeadLetters(ctx, dlq, 0)
	require.NoError(t, err)
	assert.Empty(t, dls, "purged")
}

// The counting wrapper forwards the optional Inspector, so the bus's
// dead-letter operations reach the backend's.

func (c *countingBackend) inner() (backend.Inspector, error) {
	in, ok := c.Backend.(backend.Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: %s has no Inspector", bus.ErrUnsupported, c.Capabilities().Name)
	}
	return in, nil
}

func (c *countingBackend) Topics(ctx context.Context) ([]backend.TopicInfo, error) {
	in, err := c.inner()
	if err != nil {
		return nil, err
	}
	return in.Topics(ctx)
}

func (c *countingBackend) Groups(ctx context.Context, topic string) ([]backend.GroupInfo, error) {
	in, err := c.inner()
	if err != nil {
		return nil, err
	}
	return in.Groups(ctx, topic)
}

func (c *countingBackend) Peek(ctx context.Context, topic, cursor string, n int) ([]*backend.Message, string, error) {
	in, err := c.inner()
	if err != nil {
		return nil, "", err
	}
	return in.Peek(ctx, topic, cursor, n)
}

func (c *countingBackend) Delete(ctx context.Context, topic string, ids []string) (int, error) {
	in, err := c.inner()
	if err != nil {
		return 0, err
	}
	return in.Delete(ctx, topic, ids)
}

// DeleteCopies forwards to the backend's CopyDeleter, or deletes by ID as
// the bus does without one.
func (c *countingBackend) DeleteCopies(ctx context.Context, topic string, msgs []*backend.Message) (int, error) {
	in, err := c.inner()
	if err != nil {
		return 0, err
	}
	if cd, ok := in.(backend.CopyDeleter); ok {
		return cd.DeleteCopies(ctx, topic, msgs)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return in.Delete(ctx, topic, ids)
}

// testDeleteTopic: a backend.TopicDeleter removes a topic's messages and
// groups: a group made afterwards from the oldest message sees only what
// was published after the delete, and deleting again is not an error.
func testDeleteTopic(t *testing.T, s *suite) {
	h := s.newHarness(t)
	del, ok := h.be.Backend.(backend.TopicDeleter)
	if !ok {
		t.Skipf("%s does not implement backend.TopicDeleter", s.caps.Name)
	}
	topic := h.topic("delete")
	payloads := make(chan string, 16)
	handler := func(_ context.Context, d *bus.Delivery) error {
		payloads <- string(d.Payload)
		return nil
	}
	sub := h.subscribe(context.Background(), topic, handler,
		bus.WithGroup(h.group("before")), bus.WithStartFrom(backend.StartOldest))
	h.publishN(topic, "old", 3)
	for range 3 {
		recv(t, s, payloads, "the messages published before the delete")
	}
	h.closeSub(sub)

	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	require.NoError(t, del.DeleteTopic(ctx, topic), "delete the topic")
	require.NoError(t, del.DeleteTopic(ctx, topic), "deleting a deleted topic is not an error")
	if in, ok := h.be.Backend.(backend.Inspector); ok {
		gs, err := in.Groups(ctx, topic)
		require.NoError(t, err, "groups of a deleted topic")
		assert.Empty(t, gs, "a deleted topic has no groups")
	}

	h.publishN(topic, "new", 2)
	sub = h.subscribe(context.Background(), topic, handler,
		bus.WithGroup(h.group("after")), bus.WithStartFrom(backend.StartOldest))
	defer h.closeSub(sub)
	got := []string{recv(t, s, payloads, "the first message published after the delete"),
		recv(t, s, payloads, "the second message published after the delete")}
	assert.ElementsMatch(t, []string{"new-0", "new-1"}, got, "only what was published after the delete")
	select {
	case p := <-payloads:
		t.Fatalf("a message of the deleted topic came back: %q", p)
	default:
	}
}

// testDeadLetterReplayedFailsAgain: a replayed message that is rejected
// again is dead-lettered again, with the same ID: the second dead letter
// is neither deduplicated against the first nor removed by the replay
// that made it, whether it arrives before or after the replay returns.
func testDeadLetterReplayedFailsAgain(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.inspector(t)
	topic, group := h.topic("refail"), h.group("refail")
	dlq := topic + ".dlq"
	var handled atomic.Int32
	var gate atomic.Pointer[chan struct{}] // closed when a replay may fail
	open := make(chan struct{})
	close(open)
	gate.Store(&open)
	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		handled.Add(1)
		select {
		case <-*gate.Load():
		case <-ctx.Done():
			return ctx.Err()
		}
		return bus.Reject(errors.New("still bad"))
	}, bus.WithGroup(group), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, &bus.Message{ID: "f-1", Payload: []byte("one")}, &bus.Message{ID: "f-2", Payload: []byte("two")})
	ctx, cancel := context.WithTimeout(context.Background(), 8*s.deadline()) // four waits and three replays
	defer cancel()
	if _, err := h.bus.DeadLetters(ctx, dlq, 0); errors.Is(err, bus.ErrUnsupported) {
		t.Skipf("%s cannot list retained messages (its Inspector's Peek is unsupported): %v", s.caps.Name, err)
	}
	var last []string
	listed := func(want int) func() bool {
		return func() bool {
			// A call of its own: a request a cluster loses meanwhile
			// costs this call's deadline, not the case's.
			ctx, cancel := context.WithTimeout(ctx, s.deadline()/4)
			defer cancel()
			dls, err := h.bus.DeadLetters(ctx, dlq, 0)
			last = last[:0]
			if err != nil {
				last = append(last, err.Error())
			}
			for _, d := range dls {
				last = append(last, fmt.Sprintf("%s@%d", d.ID, d.Attempt))
			}
			return err == nil && len(dls) == want
		}
	}
	if !assert.Eventually(t, listed(2), s.deadline(), pollInterval, "two dead letters listed") {
		t.Fatalf("dead letters listed: %v; handled: %d", last, handled.Load())
	}
	// In the first round the replayed messages fail only after the replay
	// returned; in the others at once, so that a new dead letter may be
	// written before the replay removes the old one.
	for round := 1; round <= 3; round++ {
		wait := make(chan struct{})
		if round == 1 {
			gate.Store(&wait)
		}
		n, err := h.bus.ReplayDeadLetters(ctx, dlq, "f-1", "f-2")
		close(wait)
		gate.Store(&open)
		require.NoError(t, err, "replay round %d", round)
		require.Equal(t, 2, n, "replay round %d", round)
		if !assert.Eventually(t, listed(2), s.deadline(), pollInterval, "round %d: both messages dead-lettered again, once each", round) {
			t.Fatalf("round %d: dead letters listed: %v; handled: %d", round, last, handled.Load())
		}
		ids := make([]string, len(last))
		for i, l := range last {
			ids[i], _, _ = strings.Cut(l, "@")
		}
		assert.ElementsMatch(t, []string{"f-1", "f-2"}, ids, "round %d", round)
	}
}

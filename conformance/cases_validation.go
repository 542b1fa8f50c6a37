package conformance

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// requireNoIO checks that nothing reached the backend.
func (h *harness) requireNoIO(t testing.TB) {
	t.Helper()
	require.Zero(t, h.be.publishes.Load(), "invalid input must be rejected before any backend Publish")
	require.Zero(t, h.be.subscribes.Load(), "invalid input must be rejected before any backend Subscribe")
}

// requireRejected checks that a single-message publish failed with want
// for message 0.
func requireRejected(t testing.TB, err, want error) {
	t.Helper()
	require.ErrorIs(t, err, want, "the error wraps the sentinel")
	var pe *bus.PublishError
	require.ErrorAs(t, err, &pe, "a rejected message is reported as a *bus.PublishError")
	require.Len(t, pe.Failed, 1, "one failed message")
	assert.Equal(t, 0, pe.Failed[0].Index, "the failed message's index")
	assert.True(t, pe.Rejected, "validation failures set Rejected: nothing was sent")
}

// testInvalidTopic: bad topics are rejected by Publish and Subscribe
// before any I/O; valid edge-case topics work end to end.
func testInvalidTopic(t *testing.T, s *suite) {
	h := s.newHarness(t)
	ctx := context.Background()
	noop := func(context.Context, *bus.Delivery) error { return nil }
	tests := []struct {
		name  string
		topic string
	}{
		{"empty", ""},
		{"empty token", "orders..created"},
		{"leading dot", ".orders"},
		{"trailing dot", "orders."},
		{"space", "orders created"},
		{"slash", "orders/created"},
		{"wildcard star", "orders.*"},
		{"wildcard gt", "orders.>"},
		{"non-ASCII", "commandés"},
		{"NUL", "orders\x00"},
		{"too long", strings.Repeat("a", backend.MaxTopicLen+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := h.bus.Publish(ctx, tt.topic, &bus.Message{Payload: []byte("x")})
			require.ErrorIs(t, err, bus.ErrInvalidTopic, "Publish to %q", tt.topic)
			_, err = h.bus.Subscribe(ctx, tt.topic, noop)
			require.ErrorIs(t, err, bus.ErrInvalidTopic, "Subscribe to %q", tt.topic)
		})
	}
	h.requireNoIO(t)

	// Every valid topic works, however it looks.
	valid := []struct {
		name  string
		topic string
	}{
		{"all character classes", "Conf_1-x:y." + uniqueSuffix()},
		{"longest", padTopic("conf.longest."+uniqueSuffix(), backend.MaxTopicLen)},
	}
	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			in := &inbox{}
			h.subscribe(ctx, tt.topic, in.handle(nil), bus.WithGroup(h.group("valid")), bus.WithAckTimeout(s.longLease()),
				bus.WithDeadLetter(""))
			m := &bus.Message{Payload: []byte("valid topic")}
			h.publish(tt.topic, m)
			s.eventually(t, func() bool { return len(in.of(m.ID)) >= 1 }, "a message on valid topic %q arrives", tt.topic)
		})
	}
}

// padTopic pads topic with 'x' to n bytes.
func padTopic(topic string, n int) string {
	return topic + strings.Repeat("x", n-len(topic))
}

// testInvalidHeader: bad header keys and values are rejected before I/O.
func testInvalidHeader(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("badheader")
	tests := []struct {
		name    string
		headers map[string]string
	}{
		{"empty key", map[string]string{"": "v"}},
		{"space in key", map[string]string{"bad key": "v"}},
		{"colon in key", map[string]string{"bad:key": "v"}},
		{"non-ASCII key", map[string]string{"clé": "v"}},
		{"key too long", map[string]string{strings.Repeat("k", backend.MaxHeaderKeyLen+1): "v"}},
		{"value not UTF-8", map[string]string{"x-v": "a\xffb"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := h.bus.Publish(context.Background(), topic, &bus.Message{Headers: tt.headers, Payload: []byte("x")})
			requireRejected(t, err, bus.ErrInvalidMessage)
		})
	}
	h.requireNoIO(t)
}

// testReservedHeaderPrefix: header keys with a reserved prefix, in any
// case, are rejected before I/O.
func testReservedHeaderPrefix(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("reserved")
	var keys []string
	for _, p := range backend.ReservedHeaderPrefixes {
		keys = append(keys, p+"x", strings.ToUpper(p)+"X", p)
	}
	keys = append(keys, backend.HeaderDeadLetterReason, "Nats-Msg-Id")
	for _, k := range keys {
		t.Run(k, func(t *testing.T) {
			err := h.bus.Publish(context.Background(), topic, &bus.Message{Headers: map[string]string{k: "v"}})
			requireRejected(t, err, bus.ErrInvalidMessage)
		})
	}
	h.requireNoIO(t)
}

// testContradictoryOptions: subscribe options that contradict each other
// are refused with ErrInvalidOption before any I/O, whatever their order.
func testContradictoryOptions(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("contradict")
	noop := func(context.Context, *bus.Delivery) error { return nil }
	tests := []struct {
		name string
		opts []bus.SubscribeOption
		want string
	}{
		{"AckOnReceiveWithMaxDeliveries", []bus.SubscribeOption{bus.WithAckMode(bus.AckOnReceive), bus.WithMaxDeliveries(3)}, "WithMaxDeliveries"},
		{"MaxDeliveriesThenAckOnReceive", []bus.SubscribeOption{bus.WithMaxDeliveries(3), bus.WithAckMode(bus.AckOnReceive)}, "WithMaxDeliveries"},
		{"TwoGroups", []bus.SubscribeOption{bus.WithGroup("a"), bus.WithGroup("b")}, "WithGroup given twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := h.bus.Subscribe(context.Background(), topic, noop, tt.opts...)
			if sub != nil {
				_ = sub.Close(context.Background())
			}
			require.ErrorIs(t, err, bus.ErrInvalidOption, "contradictory options are refused")
			assert.Contains(t, err.Error(), tt.want, "the error names the option to drop")
		})
	}
	h.requireNoIO(t)
}

// testOversizedPayload: a payload over the limit is rejected before I/O;
// one at the limit is published.
func testOversizedPayload(t *testing.T, s *suite) {
	const limit = 1024
	h := s.newHarness(t, bus.WithMaxPayload(limit))
	topic := h.topic("big")
	ctx := context.Background()
	eff := limit
	if s.caps.MaxPayload > 0 && s.caps.MaxPayload < eff {
		eff = s.caps.MaxPayload
	}
	err := h.bus.Publish(ctx, topic, &bus.Message{Payload: make([]byte, eff+1)})
	requireRejected(t, err, bus.ErrPayloadTooLarge)
	h.requireNoIO(t)
	require.NoError(t, h.bus.Publish(ctx, topic, &bus.Message{Payload: make([]byte, eff)}), "a payload at the limit is accepted")
	require.Equal(t, int64(1), h.be.publishes.Load(), "the valid payload reached the backend")

	// The default limit applies without the option.
	d := s.newHarness(t)
	def := backend.DefaultMaxPayload
	if s.caps.MaxPayload > 0 && s.caps.MaxPayload < def {
		def = s.caps.MaxPayload
	}
	err = d.bus.Publish(ctx, topic, &bus.Message{Payload: make([]byte, def+1)})
	requireRejected(t, err, bus.ErrPayloadTooLarge)
	d.requireNoIO(t)
}

// testDefaultPayloadLimit: the default payload limit is the documented
// one, DefaultMaxPayload lowered to the backend's own MaxPayload; a
// payload at it arrives byte-exact, and one byte over is refused before
// any I/O with an error that names the limit and how to raise it, also
// when WithMaxPayload asked for more than the backend takes.
func testDefaultPayloadLimit(t *testing.T, s *suite) {
	limit, why := backend.DefaultMaxPayload, "bus.WithMaxPayload"
	if s.caps.MaxPayload > 0 && s.caps.MaxPayload < limit {
		limit = s.caps.MaxPayload
		why = s.caps.MaxPayloadLimit
	}
	h := s.newHarness(t)
	require.Equal(t, limit, h.bus.MaxPayload(), "the default limit is DefaultMaxPayload, or the backend's own when smaller")
	topic, group := h.topic("limit"), h.group("limit")
	ctx := context.Background()

	err := h.bus.Publish(ctx, topic, &bus.Message{Payload: make([]byte, limit+1)})
	requireRejected(t, err, bus.ErrPayloadTooLarge)
	assert.ErrorContains(t, err, strconv.Itoa(limit), "the error gives the limit")
	assert.ErrorContains(t, err, why, "the error says which limit refused the payload and how to raise it")
	h.requireNoIO(t)
	if s.caps.MaxPayload > 0 {
		// Asking the bus for more than the backend takes does not lift
		// the backend's limit, and the error says so.
		const asked = 512 << 20
		w := s.newHarness(t, bus.WithMaxPayload(asked))
		require.Equal(t, min(s.caps.MaxPayload, asked), w.bus.MaxPayload(), "WithMaxPayload cannot raise the backend's limit")
		err := w.bus.Publish(ctx, topic, &bus.Message{Payload: make([]byte, w.bus.MaxPayload()+1)})
		requireRejected(t, err, bus.ErrPayloadTooLarge)
		if s.caps.MaxPayloadLimit != "" {
			assert.ErrorContains(t, err, s.caps.MaxPayloadLimit, "the error names the backend's limit")
		}
		assert.ErrorContains(t, err, "cannot raise it", "the error says WithMaxPayload cannot lift the backend's limit")
		w.requireNoIO(t)
	}

	in := &inbox{}
	h.subscribe(ctx, topic, in.handle(nil), bus.WithGroup(group))
	payload := make([]byte, limit)
	for i := range payload {
		payload[i] = byte(i * 7 % 251)
	}
	h.publish(topic, &bus.Message{ID: "at-limit", Payload: payload})
	s.eventually(t, func() bool { return in.distinct() >= 1 }, "the payload at the limit is delivered")
	got := in.of("at-limit")
	require.NotEmpty(t, got, "delivered under its own ID")
	require.Len(t, got[0].Payload, limit, "the whole payload arrives")
	assert.True(t, bytes.Equal(payload, got[0].Payload), "the payload at the limit arrives byte-exact")
}

// testBatchWithBadMessage: one bad message fails the whole batch before
// I/O, and the error lists which messages failed.
func testBatchWithBadMessage(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("batch")
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil), bus.WithGroup(h.group("batch")), bus.WithAckTimeout(s.longLease()))
	subscribes := h.be.subscribes.Load()

	batch := []*bus.Message{
		{Payload: []byte("good 0")},
		{Headers: map[string]string{"bad key": "v"}, Payload: []byte("bad 1")},
		{Payload: []byte("good 2")},
		nil,
	}
	err := h.bus.Publish(context.Background(), topic, batch...)
	var pe *bus.PublishError
	require.ErrorAs(t, err, &pe, "a batch with bad messages returns *bus.PublishError")
	require.ErrorIs(t, err, bus.ErrInvalidMessage, "the batch error wraps the sentinel")
	require.Len(t, pe.Failed, 2, "two messages of the batch are bad")
	assert.Equal(t, 1, pe.Failed[0].Index, "index of the bad header")
	assert.Equal(t, batch[1].ID, pe.Failed[0].ID, "ID of the bad header message")
	assert.True(t, errors.Is(pe.Failed[0].Err, bus.ErrInvalidMessage), "error of the bad header message")
	assert.Equal(t, 3, pe.Failed[1].Index, "index of the nil message")
	assert.Equal(t, topic, pe.Topic, "the error names the topic")
	assert.True(t, pe.Rejected, "the whole batch was rejected before I/O")
	require.Zero(t, h.be.publishes.Load(), "nothing of an invalid batch reaches the backend")
	require.Equal(t, subscribes, h.be.subscribes.Load(), "no backend call for an invalid batch")

	marker := &bus.Message{Payload: []byte("marker")}
	h.publish(topic, marker)
	s.eventually(t, func() bool { return in.len() >= 1 }, "the marker arrives")
	s.never(t, s.ackTimeout(), func() bool { return in.len() > 1 }, "no message of the rejected batch is delivered")
	assert.Equal(t, marker.ID, in.all()[0].ID, "only the marker was delivered")
}

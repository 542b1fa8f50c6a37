package conformance

import (
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

// contentEdgeCases are messages at the edges of the content rule: what a
// wire format is most likely to alter (surrounding spaces, line breaks,
// header case, control-message look-alikes).
func contentEdgeCases() []*bus.Message {
	many := make(map[string]string, backend.MaxHeaders)
	for i := range backend.MaxHeaders {
		many["h"+strconv.Itoa(i)] = strconv.Itoa(i)
	}
	return []*bus.Message{
		{ID: "x1", Payload: []byte("a")},
		{ID: "x1.", Payload: []byte("b")}, // differs from x1 by one byte: must not be deduplicated
		{ID: strings.Repeat("i", backend.MaxIDLen)},
		{ID: "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"},
		{Key: " leading and trailing spaces ", Payload: []byte("c")},
		{Key: "k\r\nX: 1", Payload: []byte("d")},
		{Key: "заказ ✓\x00tail"},
		{Headers: map[string]string{"v": "  surrounded  ", "crlf": "a\r\nb", "nul": "\x00", "empty": "", "colon": "x: y"}},
		{Headers: map[string]string{"Trace": "upper", "trace": "lower", "TRACE": "all"}},
		{Headers: map[string]string{"Status": "404", "Description": "No Messages"}},
		{Headers: map[string]string{"Status": "100"}},
		{Headers: map[string]string{"Status": "409", "Description": "Request Timeout"}},
		{Headers: many, Payload: []byte("many headers")},
		{Headers: map[string]string{"big": strings.Repeat("v", backend.MaxHeaderBytes-len("big"))}},
		{Payload: []byte{0, 0xff, '\r', '\n', ' '}},
	}
}

// testContentRoundTrip: every message the content rule accepts arrives
// byte-exact: ID, key, header keys and values, payload.
func testContentRoundTrip(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("content"), h.group("content")
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil), bus.WithGroup(group))
	want := contentEdgeCases()
	for _, m := range want {
		h.publish(topic, m) // one by one: an empty ID is assigned per message
	}
	s.eventually(t, func() bool { return in.distinct() >= len(want) }, "every edge-case message is delivered (%d of %d)", in.distinct(), len(want))
	got := map[string]received{}
	for _, r := range in.all() {
		got[r.ID] = r
	}
	for i, m := range want {
		r, ok := got[m.ID]
		if !assert.True(t, ok, "message %d (id %q) was not delivered under its own ID", i, m.ID) {
			continue
		}
		assert.Equal(t, m.Key, r.Key, "message %d: key altered", i)
		wantHeaders := m.Headers
		if len(wantHeaders) == 0 {
			wantHeaders = nil
		}
		gotHeaders := r.Headers
		if len(gotHeaders) == 0 {
			gotHeaders = nil
		}
		assert.Equal(t, wantHeaders, gotHeaders, "message %d: headers altered", i)
		assert.Equal(t, string(m.Payload), string(r.Payload), "message %d: payload altered", i)
	}
}

// testContentRefused: what the content rule refuses is refused before any
// I/O with ErrInvalidMessage, and nothing of the batch is sent.
func testContentRefused(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("refused")
	tests := []struct {
		name string
		msg  *bus.Message
	}{
		{"id with a trailing space", &bus.Message{ID: "x1 "}},
		{"id with a line feed", &bus.Message{ID: "x1\n"}},
		{"id too long", &bus.Message{ID: strings.Repeat("i", backend.MaxIDLen+1)}},
		{"id with a non-ASCII byte", &bus.Message{ID: "idé"}},
		{"key not UTF-8", &bus.Message{Key: "\xff"}},
		{"key too long", &bus.Message{Key: strings.Repeat("k", backend.MaxKeyLen+1)}},
		{"header key too long", &bus.Message{Headers: map[string]string{strings.Repeat("k", backend.MaxHeaderKeyLen+1): "v"}}},
		{"header key with a reserved prefix", &bus.Message{Headers: map[string]string{"Nats-Msg-Id": "v"}}},
		{"header value not UTF-8", &bus.Message{Headers: map[string]string{"k": "\xfe"}}},
		{"header key with a space", &bus.Message{Headers: map[string]string{"a b": "v"}}},
		{"too many headers", &bus.Message{Headers: func() map[string]string {
			m := map[string]string{}
			for i := range backend.MaxHeaders + 1 {
				m["h"+strconv.Itoa(i)] = "v"
			}
			return m
		}()}},
		{"headers too large", &bus.Message{Headers: map[string]string{"k": strings.Repeat("v", backend.MaxHeaderBytes)}}},
	}
	for _, tt := range tests {
		before := h.be.publishes.Load()
		ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
		err := h.bus.Publish(ctx, topic, &bus.Message{Payload: []byte("fine")}, tt.msg)
		cancel()
		require.Error(t, err, "%s: must be refused", tt.name)
		assert.ErrorIs(t, err, bus.ErrInvalidMessage, "%s", tt.name)
		var pe *bus.PublishError
		require.True(t, errors.As(err, &pe), "%s: a *PublishError", tt.name)
		assert.True(t, pe.Rejected, "%s: the whole batch is rejected", tt.name)
		assert.Equal(t, before, h.be.publishes.Load(), "%s: no I/O for a refused batch", tt.name)
	}
}

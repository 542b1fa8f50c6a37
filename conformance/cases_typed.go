package conformance

import (
	"context"
	"maps"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// typedEvent is the value of the typed cases: bytes (as JSON base64) and
// text that a wire format is likely to alter.
type typedEvent struct {
	Bytes []byte `json:"bytes"`
	Text  string `json:"text"`
	N     int64  `json:"n"`
}

// typedGot is one delivery of a typed subscription.
type typedGot struct {
	v       typedEvent
	id, key string
	headers map[string]string
}

// typedInbox records the deliveries of a typed subscription.
type typedInbox struct {
	mu  sync.Mutex
	got []typedGot
}

func (in *typedInbox) handle(_ context.Context, v typedEvent, d *bus.Delivery) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.got = append(in.got, typedGot{v: v, id: d.ID, key: d.Key, headers: maps.Clone(d.Headers)})
	return nil
}

func (in *typedInbox) all() []typedGot {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]typedGot(nil), in.got...)
}

// testTypedContentRoundTrip: the content edge cases, published as typed
// events, reach a typed subscription with the value, ID, key and headers
// as published, plus the content type and event type.
func testTypedContentRoundTrip(t *testing.T, s *suite) {
	h := s.newHarness(t)
	name, group := h.topic("typed"), h.group("typed")
	topic := bus.NewTopic[typedEvent](name, bus.WithEventType("conformance.typed.v1"))
	in := &typedInbox{}
	_, err := topic.Subscribe(context.Background(), h.bus, in.handle, bus.WithGroup(group))
	require.NoError(t, err, "typed subscribe")
	var want []bus.Event[typedEvent]
	for i, m := range contentEdgeCases() {
		if len(m.Headers) >= backend.MaxHeaders-2 || headerBytes(m.Headers) > backend.MaxHeaderBytes-256 {
			continue // no room for the typed headers
		}
		want = append(want, bus.Event[typedEvent]{
			Value: typedEvent{Bytes: m.Payload, Text: m.Key, N: int64(i)},
			ID:    m.ID, Key: m.Key, Headers: m.Headers,
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	for _, e := range want {
		require.NoError(t, topic.PublishEvents(ctx, h.bus, e), "typed publish %d", e.Value.N)
	}
	s.eventually(t, func() bool { return len(in.all()) >= len(want) }, "every typed event is delivered (%d of %d)", len(in.all()), len(want))
	got := map[int64]typedGot{}
	for _, g := range in.all() {
		got[g.v.N] = g
	}
	for _, e := range want {
		g, ok := got[e.Value.N]
		if !assert.True(t, ok, "event %d was not delivered", e.Value.N) {
			continue
		}
		assert.Equal(t, string(e.Value.Bytes), string(g.v.Bytes), "event %d: bytes altered", e.Value.N)
		assert.Equal(t, e.Value.Text, g.v.Text, "event %d: text altered", e.Value.N)
		if e.ID != "" {
			assert.Equal(t, e.ID, g.id, "event %d: ID altered", e.Value.N)
		}
		assert.Equal(t, e.Key, g.key, "event %d: key altered", e.Value.N)
		wantHeaders := maps.Clone(e.Headers)
		if wantHeaders == nil {
			wantHeaders = map[string]string{}
		}
		wantHeaders[bus.HeaderContentType] = "application/json"
		wantHeaders[bus.HeaderEventType] = "conformance.typed.v1"
		assert.Equal(t, wantHeaders, g.headers, "event %d: headers", e.Value.N)
	}
}

func headerBytes(h map[string]string) int {
	n := 0
	for k, v := range h {
		n += len(k) + len(v)
	}
	return n
}

// testTypedUndecodableDeadLettered: a message the typed subscription's
// codec cannot decode, or whose content type it does not read, never
// reaches the handler: it is dead-lettered with code undecodable, the
// decode error in the reason, and reported to the observer with that
// code; the messages after it are handled.
func testTypedUndecodableDeadLettered(t *testing.T, s *suite) {
	h := s.newHarness(t)
	name, group := h.topic("undecodable"), h.group("undecodable")
	dlq := &inbox{}
	h.subscribe(context.Background(), name+".dlq", dlq.handle(nil), bus.WithGroup(group))
	topic := bus.NewTopic[typedEvent](name)
	in := &typedInbox{}
	_, err := topic.Subscribe(context.Background(), h.bus, in.handle, bus.WithGroup(group))
	require.NoError(t, err, "typed subscribe")

	broken := &bus.Message{ID: "broken", Payload: []byte(`{"n": 1`)}
	wrongType := &bus.Message{ID: "wrong-type", Payload: []byte(`{"n": "one"}`)}
	xml := &bus.Message{ID: "xml", Headers: map[string]string{bus.HeaderContentType: "application/xml"}, Payload: []byte(`{"n": 2}`)}
	h.publish(name, broken, wrongType, xml)
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	require.NoError(t, topic.Publish(ctx, h.bus, typedEvent{N: 3}, bus.WithID("good")), "typed publish")

	s.eventually(t, func() bool { return dlq.distinct() >= 3 && len(in.all()) >= 1 }, "three dead letters and the good message handled")
	for _, g := range in.all() {
		assert.Equal(t, "good", g.id, "only the decodable message reaches the handler")
	}
	reasons := map[string]string{
		"broken":     "unexpected end of JSON input",
		"wrong-type": "cannot unmarshal",
		"xml":        `"application/xml"`,
	}
	for id, reason := range reasons {
		got := dlq.of(id)
		if !assert.Len(t, got, 1, "%s dead-lettered once", id) {
			continue
		}
		assert.Equal(t, string(backend.CodeUndecodable), got[0].Headers[backend.HeaderDeadLetterCode], "%s: code", id)
		assert.Contains(t, got[0].Headers[backend.HeaderDeadLetterReason], reason, "%s: the reason says why", id)
		// The dead letter may reach its topic's subscriber before the
		// observer hears of it.
		s.eventually(t, func() bool {
			return h.events.has(func(e observer.Event) bool {
				return e.Scope == observer.ScopeDeadLetter && e.MessageID == id && e.Code == string(backend.CodeUndecodable)
			})
		}, id+": the observer is told, with code undecodable")
	}
}

package conformance

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
)

// cloudEventsExamples are the binary content mode examples of the
// CloudEvents 1.0 protocol bindings (Kafka 3.2.5, NATS 3.1.4, HTTP 3.1.4):
// the headers of an event with id 1234-1234-1234, type
// com.example.someevent, source /mycontext/subcontext and time
// 2018-04-05T03:56:24Z, exactly as the spec writes them.
var cloudEventsExamples = []struct {
	binding bus.CloudEventsBinding
	headers map[string]string
}{
	{bus.CloudEventsKafka, map[string]string{
		"ce_specversion": "1.0",
		"ce_type":        "com.example.someevent",
		"ce_source":      "/mycontext/subcontext",
		"ce_id":          "1234-1234-1234",
		"ce_time":        "2018-04-05T03:56:24Z",
		"content-type":   "application/json",
	}},
	{bus.CloudEventsNATS, map[string]string{
		"ce-specversion":     "1.0",
		"ce-type":            "com.example.someevent",
		"ce-time":            "2018-04-05T03:56:24Z",
		"ce-id":              "1234-1234-1234",
		"ce-source":          "/mycontext/subcontext",
		"ce-datacontenttype": "application/json",
	}},
	{bus.CloudEventsHTTP, map[string]string{
		"ce-specversion": "1.0",
		"ce-type":        "com.example.someevent",
		"ce-time":        "2018-04-05T03:56:24Z",
		"ce-id":          "1234-1234-1234",
		"ce-source":      "/mycontext/subcontext",
		"Content-Type":   "application/json",
	}},
}

// testTypedCloudEvents: for each CloudEvents binding, a typed topic
// writes the headers of the spec's binary mode example (time aside,
// which is the publish time), they arrive exact, and a message a
// CloudEvents producer outside bus wrote as in the example is read by a
// typed subscription, routed by its type.
func testTypedCloudEvents(t *testing.T, s *suite) {
	for _, ex := range cloudEventsExamples {
		t.Run(string(ex.binding), func(t *testing.T) {
			h := s.newHarness(t)
			name, group := h.topic("ce"), h.group("ce")
			ce := bus.WithCloudEvents(bus.CloudEvents{Binding: ex.binding, Source: "/mycontext/subcontext"})
			topic := bus.NewTopic[typedEvent](name, bus.WithEventType("com.example.someevent"), ce)
			in := &typedInbox{}
			r := bus.NewRouter(name)
			bus.Route(r, topic, in.handle)
			_, err := r.Subscribe(context.Background(), h.bus, bus.WithGroup(group))
			require.NoError(t, err, "subscribe the router")

			ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
			defer cancel()
			before := time.Now().Truncate(time.Second)
			require.NoError(t, topic.Publish(ctx, h.bus, typedEvent{N: 1}, bus.WithID("1234-1234-1234")), "typed publish")
			h.publish(name, &bus.Message{ID: "foreign", Headers: ex.headers, Payload: []byte(`{"n":2}`)})
			s.eventually(t, func() bool { return len(in.all()) >= 2 }, "both events delivered (%d)", len(in.all()))

			for _, g := range in.all() {
				if g.v.N == 2 {
					assert.Equal(t, ex.headers, g.headers, "the foreign event's headers arrive exact")
					continue
				}
				assert.Equal(t, int64(1), g.v.N, "the typed value")
				assert.Equal(t, "1234-1234-1234", g.id, "the message ID is the CloudEvents id")
				tm := g.headers[ex.binding.Header("time")]
				at, err := time.Parse(time.RFC3339Nano, tm)
				if assert.NoError(t, err, "time %q is RFC 3339", tm) {
					assert.False(t, at.Before(before), "time %v is the publish time (after %v)", at, before)
					assert.Equal(t, time.UTC, at.Location(), "time in UTC")
				}
				want := maps.Clone(ex.headers)
				want[ex.binding.Header("time")] = tm
				assert.Equal(t, want, g.headers, "the headers are the spec example's")
			}
		})
	}
}

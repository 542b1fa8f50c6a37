package bus_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

func TestCloudEventsPercentEncodesAsTheNATSAndHTTPBindingsSay(t *testing.T) {
	const source = "Euro € 😀"
	const encoded = "Euro%20%E2%82%AC%20%F0%9F%98%80" // the NATS binding's example, 3.1.3.2
	tests := []struct {
		binding bus.CloudEventsBinding
		want    string
	}{
		{bus.CloudEventsNATS, encoded},
		{bus.CloudEventsHTTP, encoded},
		{bus.CloudEventsKafka, source}, // UTF-8 as it is
	}
	for _, tt := range tests {
		t.Run(string(tt.binding), func(t *testing.T) {
			topic := bus.NewTopic[orderPaid]("orders", bus.WithEventType("order.paid"),
				bus.WithCloudEvents(bus.CloudEvents{Binding: tt.binding, Source: source}))
			m, err := topic.Message(orderPaid{"o-1", 1})
			require.NoError(t, err)
			assert.Equal(t, tt.want, m.Headers[tt.binding.Header("source")], "the source header")
			got, ok := tt.binding.Attribute(m.Headers, "source")
			assert.True(t, ok, "the source attribute reads back")
			assert.Equal(t, source, got, "decoded")
			assert.NotEmpty(t, m.ID, "an ID is assigned, to be the id attribute")
			assert.Equal(t, m.ID, m.Headers[tt.binding.Header("id")], "id is the message ID")
			assert.NotContains(t, m.Headers, bus.HeaderEventType, "the event type is CloudEvents' type")
		})
	}
}

func TestCloudEventsAttributeDecodingRules(t *testing.T) {
	b := bus.CloudEventsNATS
	tests := []struct {
		name  string
		value string
		want  string
		ok    bool
	}{
		{"lower-case hex", "a%c3%a9", "aé", true},
		{"unnecessarily encoded", "%41", "A", true},
		{"a quoted string from an older producer", `"a b \"c\""`, `a b "c"`, true},
		{"overlong UTF-8 is refused", "%C0%A0", "", false},
		{"truncated", "ab%4", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := b.Attribute(map[string]string{"ce-source": tt.value}, "source")
			assert.Equal(t, tt.ok, ok, "read")
			assert.Equal(t, tt.want, got, "value")
		})
	}
	got, ok := b.Attribute(map[string]string{"CE-Source": "x"}, "source")
	assert.True(t, ok && got == "x", "header names compare without case: %q %v", got, ok)
}

func TestCloudEventsOptionRefusesBadSettings(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	tests := []struct {
		name string
		opt  bus.TopicOption
	}{
		{"unknown binding", bus.WithCloudEvents(bus.CloudEvents{Binding: "amqp", Source: "/s"})},
		{"empty source", bus.WithCloudEvents(bus.CloudEvents{Binding: bus.CloudEventsKafka})},
	}
	for _, tt := range tests {
		err := bus.NewTopic[orderPaid]("orders", tt.opt).Publish(ctx, b, orderPaid{})
		assert.ErrorIs(t, err, bus.ErrInvalidOption, tt.name)
	}
	err := bus.NewTopic[[]byte]("orders", bus.WithCodec(bus.Raw()),
		bus.WithCloudEvents(bus.CloudEvents{Binding: bus.CloudEventsKafka, Source: "/s"})).Publish(ctx, b, nil)
	assert.ErrorIs(t, err, bus.ErrInvalidOption, "CloudEvents without an event type")
}

func TestCloudEventsIDsTheTypedLayerAssignsCountAsGenerated(t *testing.T) {
	ctx := context.Background()
	f := newFakeBackend()
	b := bus.New(f, bus.WithPublishBatching(bus.PublishBatching{Disabled: true}))
	defer b.Close(ctx)
	topic := bus.NewTopic[orderPaid]("orders", bus.WithEventType("order.paid"),
		bus.WithCloudEvents(bus.CloudEvents{Binding: bus.CloudEventsNATS, Source: "/s"}))
	require.NoError(t, topic.Publish(ctx, b, orderPaid{"o-1", 1}))
	require.NoError(t, topic.PublishEvents(ctx, b, bus.Event[orderPaid]{Value: orderPaid{"o-2", 2}}, bus.Event[orderPaid]{Value: orderPaid{"o-3", 3}, ID: "mine"}))
	require.NoError(t, topic.PublishAsync(ctx, b, orderPaid{"o-4", 4}).Get(ctx))
	got := f.publishedTo("orders")
	require.Len(t, got, 4, "four messages")
	for _, m := range got {
		assert.Equal(t, m.ID, m.Headers["ce-id"], "id is the message ID")
		assert.Equal(t, m.ID != "mine", m.IDGenerated, "%s: an ID the typed layer assigned counts as generated, a caller's does not", m.ID)
	}
}

package watermill

import (
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/msgcheck"
)

// roundTrip maps msg onto a bus message and back, as a delivery of it.
func roundTrip(t *testing.T, cfg PublisherConfig, msg *message.Message) (*bus.Message, *message.Message) {
	t.Helper()
	m, err := cfg.toBus(msg)
	require.NoError(t, err, "toBus")
	require.NoError(t, msgcheck.Check(msgcheck.Fields{
		ID: orID(m.ID), Key: m.Key, Headers: m.Headers, PayloadLen: len(m.Payload), MaxPayload: bus.DefaultMaxPayload,
		DeliverAt: m.DeliverAt,
	}), "the bus accepts the mapped message")
	back, err := fromBus(&bus.Delivery{Message: *m})
	require.NoError(t, err, "fromBus")
	return m, back
}

// orID stands for the ID Publish assigns when it is empty.
func orID(id string) string {
	if id == "" {
		return "assigned"
	}
	return id
}

func TestMessageMapsByteExactBothWays(t *testing.T) {
	tests := []struct {
		name     string
		uuid     string
		metadata map[string]string
		payload  []byte
		directID bool
	}{
		{"plain", "0198c0de-7e57-7000-8000-000000000001", map[string]string{"test": "v", "name": "x y"}, []byte("hello"), true},
		{"empty uuid", "", nil, []byte{}, false},
		{"uuid with a space", "a b", nil, []byte("x"), false},
		{"non-ASCII uuid", "ключ", nil, nil, false},
		{"uuid past the bus's limit", strings.Repeat("u", bus.MaxIDLen+1), nil, nil, false},
		{"binary payload", "id", nil, []byte{0, 0xff, 0xfe, '\n'}, true},
		{"metadata keys no header takes", "id", map[string]string{
			"with space": "a", "": "empty key", "colon:key": "b", "bus-reserved": "c", "Nats-Msg-Id": "d",
			"ключ": "e", HeaderEncoded: "the adapter's own header name",
		}, nil, true},
		{"metadata values that are not UTF-8", "id", map[string]string{"bin": "\xff\xfe", "ok": "line\nbreak"}, nil, true},
		{"empty metadata value", "id", map[string]string{"k": ""}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := message.NewMessage(tt.uuid, tt.payload)
			for k, v := range tt.metadata {
				msg.Metadata.Set(k, v)
			}
			m, back := roundTrip(t, PublisherConfig{}, msg)
			if tt.directID {
				assert.Equal(t, tt.uuid, m.ID, "a valid bus ID is the UUID itself")
			}
			assert.Equal(t, tt.uuid, back.UUID, "the UUID comes back byte-exact")
			assert.Equal(t, string(tt.payload), string(back.Payload), "the payload comes back byte-exact")
			assert.Equal(t, map[string]string(msg.Metadata), map[string]string(back.Metadata), "the metadata comes back byte-exact")
		})
	}
}

func TestMetadataPastTheHeaderCountIsEncoded(t *testing.T) {
	msg := message.NewMessage("id", nil)
	for i := range 200 {
		msg.Metadata.Set("k"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26)), "v")
	}
	m, back := roundTrip(t, PublisherConfig{}, msg)
	assert.LessOrEqual(t, len(m.Headers), bus.MaxHeaders-2, "room stays for DeliverAt and ExpiresAt")
	assert.Equal(t, map[string]string(msg.Metadata), map[string]string(back.Metadata))
}

func TestHeaderKeyRuleAgreesWithTheBus(t *testing.T) {
	keys := []string{"a", "A-b", "x_y", "bus-x", "BUS-x", "nats-x", "Nats", "with space", "", "é", "a:b", "a/b",
		strings.Repeat("k", bus.MaxHeaderKeyLen), strings.Repeat("k", bus.MaxHeaderKeyLen+1)}
	for c := range 256 {
		keys = append(keys, "k"+string([]byte{byte(c)}))
	}
	for _, k := range keys {
		err := msgcheck.Check(msgcheck.Fields{ID: "id", Headers: map[string]string{k: "v"}, MaxPayload: 1})
		assert.Equal(t, err == nil, validHeaderKey(k), "key %q: the adapter and the bus agree on whether it is a header key", k)
	}
	for _, id := range []string{"a", "a b", "", "\x7f", "~", strings.Repeat("i", bus.MaxIDLen), strings.Repeat("i", bus.MaxIDLen+1)} {
		err := msgcheck.Check(msgcheck.Fields{ID: id, MaxPayload: 1})
		assert.Equal(t, err == nil, validID(id), "id %q: the adapter and the bus agree on whether it is an ID", id)
	}
}

func TestKeyComesFromMetadataOrFunction(t *testing.T) {
	msg := message.NewMessage("id", nil)
	msg.Metadata.Set("order", "o-1")
	m, back := roundTrip(t, PublisherConfig{KeyMetadata: "order"}, msg)
	assert.Equal(t, "o-1", m.Key, "the Key is the metadata entry")
	assert.Equal(t, "o-1", back.Metadata.Get("order"), "the entry stays in the metadata")

	m, _ = roundTrip(t, PublisherConfig{KeyMetadata: "order", Key: func(m *message.Message) string { return "f-" + m.UUID }}, msg)
	assert.Equal(t, "f-id", m.Key, "the function wins over the metadata entry")
}

func TestDelayMetadataSetsDeliverAt(t *testing.T) {
	at := time.Now().Add(time.Hour).Truncate(time.Second)
	msg := message.NewMessage("id", nil)
	delay.Message(msg, delay.Until(at))
	m, back := roundTrip(t, PublisherConfig{}, msg)
	assert.True(t, at.Equal(m.DeliverAt), "DeliverAt is the delay's time: got %v, want %v", m.DeliverAt, at)
	assert.Equal(t, msg.Metadata.Get(delay.DelayedUntilKey), back.Metadata.Get(delay.DelayedUntilKey), "the delay metadata stays")

	m, _ = roundTrip(t, PublisherConfig{IgnoreDelay: true}, msg)
	assert.True(t, m.DeliverAt.IsZero(), "IgnoreDelay leaves DeliverAt zero")

	msg.Metadata.Set(delay.DelayedUntilKey, "tomorrow")
	_, err := (&PublisherConfig{}).toBus(msg)
	require.ErrorIs(t, err, bus.ErrInvalidMessage, "a delay that does not parse is refused")
}

func TestMalformedEncodedHeaderIsAnError(t *testing.T) {
	_, err := fromBus(&bus.Delivery{Message: bus.Message{ID: "id", Headers: map[string]string{HeaderEncoded: "{"}}})
	require.Error(t, err, "a foreign producer's malformed %s is refused", HeaderEncoded)
}

func FuzzMessageMapsByteExact(f *testing.F) {
	f.Add("id", "key", "value", []byte("payload"))
	f.Add("", "", "", []byte(nil))
	f.Add("a b", "bus-x", "\xff", []byte{0})
	f.Fuzz(func(t *testing.T, uuid, k, v string, payload []byte) {
		msg := message.NewMessage(uuid, payload)
		msg.Metadata.Set(k, v)
		m, err := (&PublisherConfig{IgnoreDelay: true}).toBus(msg)
		require.NoError(t, err)
		back, err := fromBus(&bus.Delivery{Message: *m})
		require.NoError(t, err)
		require.Equal(t, uuid, back.UUID)
		require.Equal(t, string(payload), string(back.Payload))
		require.Equal(t, map[string]string{k: v}, map[string]string(back.Metadata))
	})
}

package redisstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		msg  backend.Message
	}{
		{name: "plain", msg: backend.Message{ID: "a", Payload: []byte("p")}},
		{name: "key and headers", msg: backend.Message{ID: "b c", Key: "k", Headers: map[string]string{"id": "user", "m": "x", "p": "y"}, Payload: []byte{0, 1, 2}}},
		{name: "empty payload", msg: backend.Message{ID: "c", Payload: []byte{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.msg.PublishedAt = time.UnixMilli(1700000000123)
			fields := appendFields(nil, &tt.msg, appendMeta(nil, &tt.msg))
			values := map[string]any{}
			for i := 0; i < len(fields); i += 2 {
				switch v := fields[i+1].(type) {
				case []byte:
					values[fields[i].(string)] = string(v)
				case string:
					values[fields[i].(string)] = v
				}
			}
			var got backend.Message
			require.NoError(t, decode("1-1", values, &got))
			assert.Equal(t, tt.msg.ID, got.ID)
			assert.Equal(t, tt.msg.Key, got.Key)
			assert.Equal(t, string(tt.msg.Payload), string(got.Payload))
			assert.True(t, tt.msg.PublishedAt.Equal(got.PublishedAt))
			if len(tt.msg.Headers) > 0 {
				assert.Equal(t, tt.msg.Headers, got.Headers, "headers named like reserved fields survive")
			} else {
				assert.Empty(t, got.Headers)
			}
		})
	}
}

func TestDecodeRejectsMalformedEntriesWithoutEchoingWireText(t *testing.T) {
	// Every name and value below carries "LEAK": a decode error must name
	// the entry and the problem, never wire text.
	tests := []struct {
		name   string
		values map[string]any
	}{
		{name: "no fields", values: map[string]any{}},
		{name: "foreign field", values: map[string]any{"m": "1 LEAK", "p": "LEAK", "otherLEAK": "LEAK"}},
		{name: "missing payload", values: map[string]any{"m": "1 LEAK", "fooLEAK": "LEAK"}},
		{name: "missing meta", values: map[string]any{"p": "LEAK", "fooLEAK": "LEAK"}},
		{name: "meta without id", values: map[string]any{"m": "1 ", "p": "LEAK"}},
		{name: "meta without space", values: map[string]any{"m": "1LEAK", "p": "LEAK"}},
		{name: "bad time", values: map[string]any{"m": "LEAK a", "p": "LEAK"}},
		{name: "empty header name", values: map[string]any{"m": "1 LEAK", "p": "LEAK", "h:": "LEAK"}},
		{name: "non-string value", values: map[string]any{"m": "1 LEAK", "p": int64(3)}},
		{name: "non-string header", values: map[string]any{"m": "1 LEAK", "p": "LEAK", "h:LEAK": int64(3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m backend.Message
			err := decode("1-1", tt.values, &m)
			require.ErrorIs(t, err, errMalformed)
			assert.Contains(t, err.Error(), "1-1", "the error names the entry")
			assert.NotContains(t, err.Error(), "LEAK", "the error echoes no wire text")
		})
	}
}

// A read's payload slab has room for exactly its entries' payload fields;
// how a slab copies is tested in internal/slab.
func TestPayloadSlabHasRoomForThePayloadFields(t *testing.T) {
	entries := []rawEntry{{start: 0, end: 2}, {start: 2, end: 3}, {start: 3, end: 5}}
	fields := []rawField{
		{name: []byte(fieldMeta), value: []byte("1 a")}, {name: []byte(fieldPayload), value: []byte("abc")},
		{name: []byte(fieldPayload), value: []byte{}},
		{name: []byte(fieldKey), value: []byte("k")}, {name: []byte(fieldPayload), value: []byte("de")},
	}
	payloads := newPayloadSlab(entries, fields)
	require.Equal(t, 5, payloads.Room(), "room for exactly the payload fields")
	assert.Equal(t, []byte("abc"), payloads.Copy([]byte("abc")))
	assert.Equal(t, []byte("de"), payloads.Copy([]byte("de")))
	assert.Zero(t, payloads.Room(), "the read's payloads fill it")
}

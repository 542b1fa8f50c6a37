package redisstream

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// captureBackend keeps copies of the messages the bus hands it (the bus
// reuses its own after Publish returns), so the fuzz targets feed the
// codec exactly what Publish accepts.
type captureBackend struct{ msgs []*backend.Message }

func (c *captureBackend) Publish(_ context.Context, _ string, msgs []*backend.Message) error {
	c.msgs = c.msgs[:0]
	for _, m := range msgs {
		cp := *m
		cp.Headers = maps.Clone(m.Headers)
		cp.Payload = bytes.Clone(m.Payload)
		c.msgs = append(c.msgs, &cp)
	}
	return nil
}

func (c *captureBackend) Subscribe(context.Context, string, backend.SubscribeConfig) (backend.Subscription, error) {
	return nil, bus.ErrUnsupported
}

func (c *captureBackend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Name: "capture", MaxPayload: DefaultMaxPayload}
}

func (c *captureBackend) Close() error { return nil }

// entryValues turns stream fields as appendFields builds them into the
// field map a Redis reply decodes to (every value a string).
func entryValues(fields []any) map[string]any {
	values := make(map[string]any, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		switch v := fields[i+1].(type) {
		case []byte:
			values[fields[i].(string)] = string(v)
		case string:
			values[fields[i].(string)] = v
		}
	}
	return values
}

// FuzzEntryRoundTrip: a message Publish accepts is stored as a stream
// entry that decodes to the same ID, Key, headers, payload and publish
// time (in ms), byte for byte. A message Publish refuses is refused with
// ErrInvalidMessage or ErrPayloadTooLarge.
func FuzzEntryRoundTrip(f *testing.F) {
	f.Add("id-1", "", "", "", "", "", []byte("payload"))
	f.Add("id 2", "key", "m", "meta-named header", "p", "payload-named header", []byte{0, 1, 2, 0xff})
	f.Add(" id ", "k\r\nX: 1", "Content-Type", " value with spaces ", "x", "", []byte{})
	f.Add("x1\n", "ключ", "h:inner", "v", "key", "v2", []byte("p"))
	f.Add("", "", "A", "\x00", "B", "\r\n", []byte(nil))
	f.Add(strings.Repeat("i", 300), strings.Repeat("k", 300), "bus-x", "reserved", "Nats-Msg-Id", "x", []byte("p"))
	capture := &captureBackend{}
	b := bus.New(capture)
	f.Fuzz(func(t *testing.T, id, key, hk1, hv1, hk2, hv2 string, payload []byte) {
		var headers map[string]string
		for _, kv := range [][2]string{{hk1, hv1}, {hk2, hv2}} {
			if kv[0] == "" {
				continue
			}
			if headers == nil {
				headers = map[string]string{}
			}
			headers[kv[0]] = kv[1]
		}
		wantHeaders := make(map[string]string, len(headers))
		for k, v := range headers {
			wantHeaders[k] = v
		}
		want := string(payload)
		err := b.Publish(context.Background(), "fuzz", &bus.Message{ID: id, Key: key, Headers: headers, Payload: payload})
		if err != nil {
			if !errors.Is(err, bus.ErrInvalidMessage) && !errors.Is(err, bus.ErrPayloadTooLarge) {
				t.Fatalf("Publish refused a message with an error that is not ErrInvalidMessage: %v", err)
			}
			return
		}
		if len(capture.msgs) != 1 {
			t.Fatalf("the backend got %d messages, want 1", len(capture.msgs))
		}
		m := capture.msgs[0]
		if id != "" && m.ID != id {
			t.Fatalf("the bus changed the ID %q to %q", id, m.ID)
		}
		m.PublishedAt = m.PublishedAt.Truncate(time.Millisecond)

		values := entryValues(appendFields(nil, m, appendMeta(nil, m)))
		if got := fieldCount(m); got != 2*len(values) {
			t.Fatalf("fieldCount %d, but the entry has %d fields", got, len(values))
		}
		var got backend.Message
		if err := decode("1-1", values, &got); err != nil {
			t.Fatalf("an accepted message does not decode: %v", err)
		}
		if got.ID != m.ID {
			t.Errorf("ID %q came back as %q", m.ID, got.ID)
		}
		if got.Key != key {
			t.Errorf("Key %q came back as %q", key, got.Key)
		}
		if !bytes.Equal(got.Payload, []byte(want)) {
			t.Errorf("payload %q came back as %q", want, got.Payload)
		}
		if !got.PublishedAt.Equal(m.PublishedAt) {
			t.Errorf("publish time %v came back as %v", m.PublishedAt, got.PublishedAt)
		}
		if len(got.Headers) != len(wantHeaders) {
			t.Fatalf("headers %q came back as %q", wantHeaders, got.Headers)
		}
		for k, v := range wantHeaders {
			if gv, ok := got.Headers[k]; !ok || gv != v {
				t.Errorf("header %q=%q came back as %q (present %v)", k, v, gv, ok)
			}
		}
	})
}

// fuzzEntry splits data at NUL bytes into field name, value, name, value
// ...: an arbitrary entry as a foreign producer could write it.
func fuzzEntry(data []byte) map[string]any {
	toks := strings.Split(string(data), "\x00")
	values := make(map[string]any, len(toks)/2)
	for i := 0; i+1 < len(toks); i += 2 {
		values[toks[i]] = toks[i+1]
	}
	return values
}

func decodeSeeds(f *testing.F) {
	for _, s := range []string{
		"m\x001700000000000 id\x00p\x00payload",
		"m\x001700000000000 id\x00p\x00payload\x00key\x00k\x00h:a\x00b",
		"m\x00-1 x y\x00p\x00",
		"m\x001 \x00p\x00x",
		"m\x00notanumber-sensitive id\x00p\x00x",
		"m\x0099999999999999999999 id\x00p\x00x",
		"p\x00payload-without-meta",
		"m\x001 a\x00p\x00x\x00foreign-field-name\x00foreign-field-value",
		"m\x001 a\x00p\x00x\x00h:\x00empty-header-name",
		"",
	} {
		f.Add([]byte(s))
	}
}

// FuzzDecode: decode never panics on any entry, and what it accepts
// encodes back to an entry that decodes to the same message.
func FuzzDecode(f *testing.F) {
	decodeSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m backend.Message
		if err := decode("1-1", fuzzEntry(data), &m); err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("decode error does not wrap errMalformed: %v", err)
			}
			return
		}
		var again backend.Message
		if err := decode("1-1", entryValues(appendFields(nil, &m, appendMeta(nil, &m))), &again); err != nil {
			t.Fatalf("a decoded message does not survive encode and decode: %v", err)
		}
		if again.ID != m.ID || again.Key != m.Key || !bytes.Equal(again.Payload, m.Payload) ||
			!again.PublishedAt.Equal(m.PublishedAt) || len(again.Headers) != len(m.Headers) {
			t.Fatalf("re-encoding changed the message: %+v became %+v", m, again)
		}
		for k, v := range m.Headers {
			if again.Headers[k] != v {
				t.Fatalf("re-encoding changed header %q: %q became %q", k, v, again.Headers[k])
			}
		}
	})
}

// FuzzDecodeErrorsEchoNoWireContent: a decode error names the entry ID
// and the problem, never a field name or value read from the wire (they
// may be payload bytes or a foreign producer's data). The seeds carry the
// marker "SECRET" in names and values; no decode error text contains it
// on its own, so finding it in an error means the error echoed the entry.
func FuzzDecodeErrorsEchoNoWireContent(f *testing.F) {
	for _, s := range []string{
		"m\x00SECRET id\x00p\x00x",
		"m\x001 a\x00p\x00x\x00SECRET-field\x00v",
		"m\x001 a\x00p\x00x\x00other\x00SECRET-value",
		"m\x001 a\x00pSECRET\x00x",
		"mSECRET\x001 a\x00p\x00SECRET-payload",
		"m\x001 a\x00p\x00x\x00h:\x00SECRET",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m backend.Message
		err := decode("1-1", fuzzEntry(data), &m)
		if err != nil && strings.Contains(err.Error(), "SECRET") {
			t.Fatalf("decode error echoes content of the entry: %q", err.Error())
		}
	})
}

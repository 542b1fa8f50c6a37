package nats

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
)

// captureBackend keeps copies of the messages the bus hands it (the bus
// reuses its own after Publish returns), so the fuzz target feeds the
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
	return backend.Capabilities{Name: "capture", MaxPayload: 512 << 10}
}

func (c *captureBackend) Close() error { return nil }

// fuzzIDScope is the topic scope put before IDs in Nats-Msg-Id.
const fuzzIDScope = "orders."

// FuzzMessageRoundTrip: a message Publish accepts is either refused by
// encode with ErrInvalidMessage, or crosses a real NATS connection (the
// client's header encoding, the server, the client's header parsing) and
// decodes to the same ID, Key, headers and payload, byte for byte, and is
// never taken for a server control message.
func FuzzMessageRoundTrip(f *testing.F) {
	f.Add("id-1", "", "", "", "", "", []byte("payload"))
	f.Add("x1 ", "key", "Content-Type", "text/plain", "X", "", []byte{0, 1, 0xff})
	f.Add(" id ", "k\r\nX: 1", "Trace", " value with spaces ", "Empty", "", []byte{})
	f.Add("x1\n", "ключ", "Status", "404", "Description", "Not Found", []byte(nil))
	f.Add("x1\t", " k ", "Status", "100", "A", "\t", []byte{})
	f.Add("", "", "A", "\x00", "B", "\r\n", []byte("p"))
	f.Add(strings.Repeat("i", 300), "", "bus-key", "reserved", "Nats-Msg-Id", "x", []byte("p"))
	f.Add("id", "k:v", "multi", "a, b", "colon", "a: b", []byte("x"))
	f.Add("id-3", "k", "Status", "404", "Description", "Not Found", []byte{})
	f.Add("id-4", " k ", "Trace", " spaced ", "Tab", "\tx\t", []byte{})
	f.Add("id-5", "k\r\nX: 1", "Status", "100", "Crlf", "a\r\nb", []byte(nil))

	srv := natstest.Start(f, natstest.WithoutJetStream())
	nc, err := natsgo.Connect(srv.URL())
	if err != nil {
		f.Fatalf("connect: %v", err)
	}
	f.Cleanup(nc.Close)
	const subject = "fuzz.roundtrip"
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		f.Fatalf("subscribe: %v", err)
	}
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
		wantHeaders := maps.Clone(headers)
		wantPayload := string(payload)
		err := b.Publish(context.Background(), "fuzz", &bus.Message{ID: id, Key: key, Headers: headers, Payload: payload})
		if err != nil {
			if !errors.Is(err, bus.ErrInvalidMessage) && !errors.Is(err, bus.ErrPayloadTooLarge) {
				t.Fatalf("Publish refused a message with an error that is not ErrInvalidMessage: %v", err)
			}
			return
		}
		m := capture.msgs[0]
		msg, err := encode(subject, m, false, fuzzIDScope)
		if err != nil {
			if !errors.Is(err, bus.ErrInvalidMessage) {
				t.Fatalf("encode refused with an error that is not ErrInvalidMessage: %v", err)
			}
			return
		}
		if err := nc.PublishMsg(msg); err != nil {
			t.Fatalf("encode accepted a message the client cannot send: %v", err)
		}
		got, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the message did not come back: %v", err)
		}
		for k := range got.Header {
			if strings.EqualFold(k, hdrStatus) || strings.EqualFold(k, hdrDescription) {
				t.Fatalf("a user header travels as %q, which the client reads as a server status line", k)
			}
		}
		var out backend.Message
		decodeHeaders(got.Header, &out, fuzzIDScope)
		if out.ID != m.ID {
			t.Errorf("ID %q came back as %q", m.ID, out.ID)
		}
		if out.Key != key {
			t.Errorf("Key %q came back as %q", key, out.Key)
		}
		if string(got.Data) != wantPayload {
			t.Errorf("payload %q came back as %q", wantPayload, got.Data)
		}
		if len(out.Headers) != len(wantHeaders) {
			t.Fatalf("headers %q came back as %q", wantHeaders, out.Headers)
		}
		for k, v := range wantHeaders {
			if gv, ok := out.Headers[k]; !ok || gv != v {
				t.Errorf("header %q=%q came back as %q (present %v)", k, v, gv, ok)
			}
		}
	})
}

// FuzzParseAckSubject: any reply subject is parsed or refused, never a
// panic; a parsed one names a stream and a positive delivery count.
func FuzzParseAckSubject(f *testing.F) {
	f.Add("$JS.ACK.ORDERS.workers.1.2.3.1700000000000000000.0")
	f.Add("$JS.ACK.hub.acc.ORDERS.workers.2.10.9.1700000000000000000.5.token")
	f.Add("$JS.ACK.ORDERS.workers.x.2.3.4.0")
	f.Add("$JS.ACK.ORDERS.workers.1.2.x.9300000000000000000.0")
	f.Add("$JS.ACK.ORDERS.workers.1.18446744073709551615.3.4.0")
	f.Add("$JS.ACK.....")
	f.Add("_INBOX.abc")
	f.Add("")
	f.Fuzz(func(t *testing.T, reply string) {
		meta, err := parseAckSubject(reply)
		if rest, ok := strings.CutPrefix(reply, "$JS.ACK."); ok {
			// The one-pass reading of the first form agrees with the
			// token by token one whenever it takes a subject.
			if fast, ok := parseAckV1(rest); ok {
				slow, err := parseAckTokens(rest)
				if err != nil || slow != fast {
					t.Fatalf("%q: one pass %+v, token by token %+v (%v)", reply, fast, slow, err)
				}
			}
		}
		if err != nil {
			return
		}
		if !strings.HasPrefix(reply, "$JS.ACK.") {
			t.Fatalf("parsed %q, which is not an ack subject", reply)
		}
		if meta.delivered < 0 {
			t.Fatalf("parsed %q with a negative delivery count %d", reply, meta.delivered)
		}
	})
}

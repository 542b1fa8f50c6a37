package bus_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/eventbus-go/bus"
)

// recordingBackend keeps what reaches Publish, to check that only valid
// messages get there.
type recordingBackend struct {
	nopBackend
	got []*bus.BackendMessage
}

func (r *recordingBackend) Publish(_ context.Context, _ string, msgs []*bus.BackendMessage) error {
	for _, m := range msgs {
		cp := *m
		r.got = append(r.got, &cp)
	}
	return nil
}

// wording is the fixed text of the bus's validation errors.
const wording = `bus: publish "fuzz": batch rejected, nothing sent: 1 invalid message(s); #0: invalid message: payload too large: ` +
	`empty id id is bytes, more than id has byte at (visible ASCII only) key is bytes, more than key is not valid UTF-8 ` +
	`headers, more than headers are bytes, more than empty header key header key is bytes, more than ` +
	`header key has byte at (token characters only) uses reserved prefix "bus-" "nats-" value is not valid UTF-8 limit 64`

// FuzzValidateMessage: Publish never panics, refuses with ErrInvalidMessage
// or ErrPayloadTooLarge and calls no backend, or accepts a message that
// obeys the content rule and hands it to the backend unchanged.
func FuzzValidateMessage(f *testing.F) {
	f.Add("id-1", "key", "h", "v", []byte("payload"))
	f.Add("", " k\r\n ", "Status", "404", []byte{})
	f.Add("x1 ", "k", "bus-dlq-x", "v", []byte{0})
	f.Add("é", "\xff", "a b", "\xff", []byte("x"))
	f.Fuzz(func(t *testing.T, id, key, hk, hv string, payload []byte) {
		be := &recordingBackend{}
		b := bus.New(be, bus.WithMaxPayload(64))
		defer b.Close(context.Background())
		m := &bus.Message{ID: id, Key: key, Headers: map[string]string{hk: hv}, Payload: payload}
		err := b.Publish(context.Background(), "fuzz", m)
		if err != nil {
			if !errors.Is(err, bus.ErrInvalidMessage) && !errors.Is(err, bus.ErrPayloadTooLarge) {
				t.Fatalf("refused with an unexpected error: %v", err)
			}
			if len(be.got) != 0 {
				t.Fatalf("a refused message reached the backend")
			}
			// The error never quotes a header value, a key or an ID (only
			// a short prefix of a header key).
			public := strconv.Quote(hk) + " " + hk
			for _, v := range []string{hv, key, id} {
				if len(v) >= 8 && strings.Contains(err.Error(), v) && !strings.Contains(public, v) && !strings.Contains(wording, v) {
					t.Fatalf("the error quotes message content %q: %v", v, err)
				}
			}
			return
		}
		if len(be.got) != 1 {
			t.Fatalf("an accepted message reached the backend %d times", len(be.got))
		}
		g := be.got[0]
		if g.ID != m.ID || g.Key != key || g.Headers[hk] != hv || string(g.Payload) != string(payload) {
			t.Fatalf("the backend got an altered message")
		}
		for i := 0; i < len(g.ID); i++ {
			if g.ID[i] < 0x21 || g.ID[i] > 0x7e {
				t.Fatalf("accepted id %q has byte %#x", g.ID, g.ID[i])
			}
		}
		if !utf8.ValidString(key) || !utf8.ValidString(hv) || len(key) > bus.MaxKeyLen || len(payload) > 64 {
			t.Fatalf("accepted a message outside the rule: key %q value %q payload %d bytes", key, hv, len(payload))
		}
	})
}

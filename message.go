package bus

import (
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgcheck"
)

// Message is one event. Publish assigns ID when it is empty.
type Message struct {
	// ID is unique per message; Publish assigns a time-ordered UUID
	// (version 7) when it is empty. Otherwise it is 1 to MaxIDLen bytes of
	// visible ASCII (0x21-0x7E: no spaces, no control characters).
	// Backends that deduplicate use it.
	ID string
	// Key is an optional ordering or partition key: any valid UTF-8 of at
	// most MaxKeyLen bytes.
	Key string
	// Headers are user metadata. Keys are 1 to MaxHeaderKeyLen bytes of
	// HTTP token characters and must not start with a reserved prefix (see
	// ReservedHeaderPrefixes); keys that differ only in case are distinct.
	// Values are any valid UTF-8, spaces and line breaks included. A
	// message has at most MaxHeaders headers of at most MaxHeaderBytes
	// (keys and values together).
	Headers map[string]string
	// Payload is opaque bytes.
	Payload []byte
	// ExpiresAt, when set, is when the message stops being worth
	// handling (a price valid for 30 s): a delivery that would start at or
	// after it never reaches the handler, and is dead-lettered with code
	// expired (dropped without a dead-letter topic), reported once; a retry
	// that would come at or after it dead-letters the message at once. It
	// is carried with millisecond precision, in a reserved header the
	// subscriber removes (so a message with ExpiresAt may have one header
	// fewer than MaxHeaders). The zero time means never; a time
	// outside the range every backend carries, 1677-09-21T00:12:43.146Z
	// to 2262-04-11T23:47:16.854Z (int64 nanoseconds since the Unix
	// epoch, as time.Time.UnixNano), is refused with ErrInvalidMessage.
	ExpiresAt time.Time
	// DeliverAt, when set and still to come, is the earliest time the
	// message may be delivered: it is stored at the broker at once and
	// no member of any group receives it before then, across restarts of
	// the publisher, the subscribers and (when persistent) the broker. It
	// is delivered to the groups that exist when it is due. With key
	// ordering it takes its place in its key's order when it becomes due,
	// behind what was published for the key before then. It is carried
	// with millisecond precision, in a reserved header the subscriber
	// removes; it must come before ExpiresAt. A DeliverAt already past
	// delivers at once. The zero time means at once. It must lie in the
	// range ExpiresAt must.
	DeliverAt time.Time
}

// validateMessage checks one message against the content rule and the
// limits (internal/msgcheck, shared with the outbox); payloadLimit says
// what sets maxPayload (see payloadLimit).
func validateMessage(m *Message, maxPayload int, payloadLimit string) error {
	return validateMessageGen(m, maxPayload, payloadLimit, false)
}

// payloadLimit returns the largest payload Publish accepts, the smaller
// of the bus's own (WithMaxPayload's, set says whether it was given)
// and the backend's, and words that say which of the two it is and how to
// raise it, for the error of a payload over it.
func payloadLimit(own int, set bool, caps Capabilities) (int, string) {
	if caps.MaxPayload > 0 && caps.MaxPayload < own {
		why := caps.MaxPayloadLimit
		if why == "" {
			why = fmt.Sprintf("the %s backend's limit", caps.Name)
		}
		if set {
			why += fmt.Sprintf(" (bus.WithMaxPayload(%d) cannot raise it)", own)
		}
		return caps.MaxPayload, why
	}
	why := "the bus's limit, bus.DefaultMaxPayload; raise it with bus.WithMaxPayload"
	if set {
		why = "the bus's limit, set by bus.WithMaxPayload; raise it there"
	}
	if caps.MaxPayload > 0 {
		why += fmt.Sprintf(" (to at most %d, the %s backend's own limit)", caps.MaxPayload, caps.Name)
	}
	return own, why
}

// validateMessageGen is validateMessage for a message whose ID, when
// generated is set, is one the bus generated for it: that ID is valid by
// construction.
func validateMessageGen(m *Message, maxPayload int, payloadLimit string, generated bool) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidMessage)
	}
	return msgcheck.Check(msgcheck.Fields{
		ID: m.ID, Key: m.Key, IDGenerated: generated, Headers: m.Headers, PayloadLen: len(m.Payload), MaxPayload: maxPayload, PayloadLimit: payloadLimit,
		DeliverAt: m.DeliverAt, ExpiresAt: m.ExpiresAt,
	})
}

// plain reports whether m has neither a key, headers, a DeliverAt nor an
// ExpiresAt.
func plain(m *Message) bool {
	return m.Key == "" && len(m.Headers) == 0 && m.DeliverAt.IsZero() && m.ExpiresAt.IsZero()
}

// withTimes returns m's headers with a DeliverAt still to come (after
// now) and ExpiresAt in their headers: a copy, the caller's map is its
// own.
func withTimes(m *Message, now time.Time) map[string]string {
	if m.DeliverAt.IsZero() && m.ExpiresAt.IsZero() {
		return m.Headers
	}
	return backend.WithTimes(m.Headers, m.DeliverAt, m.ExpiresAt, now)
}

// takeTimes reads HeaderDeliverAt and HeaderExpiresAt from delivered
// headers and returns the headers without them (a copy when one was
// there); a malformed time is the zero time.
func takeTimes(h map[string]string) (out map[string]string, deliverAt, expiresAt time.Time) {
	_, dok := h[backend.HeaderDeliverAt]
	_, eok := h[backend.HeaderExpiresAt]
	if !dok && !eok {
		return h, time.Time{}, time.Time{}
	}
	deliverAt, _ = backend.HeaderTime(h, backend.HeaderDeliverAt)
	expiresAt, _ = backend.HeaderTime(h, backend.HeaderExpiresAt)
	out = make(map[string]string, len(h))
	for k, val := range h {
		if k != backend.HeaderExpiresAt && k != backend.HeaderDeliverAt {
			out[k] = val
		}
	}
	if len(out) == 0 {
		out = nil
	}
	return out, deliverAt, expiresAt
}

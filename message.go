package bus

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/eventbus-go/bus/backend"
)

// Message is one event. Publish assigns ID when it is empty.
type Message struct {
	// ID is unique per message; Publish assigns a time-ordered UUID
	// (version 7) when it is empty. Otherwise it is 1 to backend.MaxIDLen bytes of
	// visible ASCII (0x21-0x7E: no spaces, no control characters).
	// Backends that deduplicate use it.
	ID string
	// Key is an optional ordering or partition key: any valid UTF-8 of at
	// most backend.MaxKeyLen bytes.
	Key string
	// Headers are user metadata. Keys are 1 to backend.MaxHeaderKeyLen bytes of
	// HTTP token characters and must not start with a reserved prefix (see
	// backend.ReservedHeaderPrefixes); keys that differ only in case are distinct.
	// Values are any valid UTF-8, spaces and line breaks included. A
	// message has at most backend.MaxHeaders headers of at most backend.MaxHeaderBytes
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
	// fewer than backend.MaxHeaders). The zero time means never.
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
	// delivers at once. The zero time means at once.
	DeliverAt time.Time
}

// validateMessage checks one message against the content rule and the
// limits.
func validateMessage(m *Message, maxPayload int) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidMessage)
	}
	if err := validateID(m.ID); err != nil {
		return err
	}
	if len(m.Key) > backend.MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, more than %d", ErrInvalidMessage, len(m.Key), backend.MaxKeyLen)
	}
	if !utf8.ValidString(m.Key) {
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalidMessage)
	}
	if len(m.Payload) > maxPayload {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, len(m.Payload), maxPayload)
	}
	if err := validateTimes(m); err != nil {
		return err
	}
	if maxHeaders := backend.MaxHeaders - timeHeaders(m); len(m.Headers) > maxHeaders {
		return fmt.Errorf("%w: %d headers, more than %d", ErrInvalidMessage, len(m.Headers), maxHeaders)
	}
	total := 0
	for k, v := range m.Headers {
		if err := validateHeader(k, v); err != nil {
			return err
		}
		total += len(k) + len(v)
	}
	if total > backend.MaxHeaderBytes {
		return fmt.Errorf("%w: headers are %d bytes, more than %d", ErrInvalidMessage, total, backend.MaxHeaderBytes)
	}
	return nil
}

// validateID checks a caller's message ID (empty IDs are assigned before).
func validateID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty id", ErrInvalidMessage)
	}
	if len(id) > backend.MaxIDLen {
		return fmt.Errorf("%w: id is %d bytes, more than %d", ErrInvalidMessage, len(id), backend.MaxIDLen)
	}
	if visibleASCII(id) {
		return nil
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: id has byte %#x at %d (visible ASCII only)", ErrInvalidMessage, c, i)
		}
	}
	return nil
}

// visibleASCII reports whether every byte of s is in 0x21-0x7e. It tests
// eight bytes at a time: an ID is checked on every Publish.
func visibleASCII(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		below := (w - 0x21*ones) &^ w & highs // some byte < 0x21
		above := ((w + ones) | w) & highs     // some byte >= 0x7f
		if below|above != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

func validateHeader(k, v string) error {
	if k == "" {
		return fmt.Errorf("%w: empty header key", ErrInvalidMessage)
	}
	if len(k) > backend.MaxHeaderKeyLen {
		return fmt.Errorf("%w: header key is %d bytes, more than %d", ErrInvalidMessage, len(k), backend.MaxHeaderKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			return fmt.Errorf("%w: header key %q has byte %#x at %d (token characters only)", ErrInvalidMessage, shortKey(k), k[i], i)
		}
	}
	for _, p := range backend.ReservedHeaderPrefixes {
		if len(k) >= len(p) && strings.EqualFold(k[:len(p)], p) {
			return fmt.Errorf("%w: header key %q uses reserved prefix %q", ErrInvalidMessage, shortKey(k), p)
		}
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: header %q value is not valid UTF-8", ErrInvalidMessage, shortKey(k))
	}
	return nil
}

// shortKey is a header key cut for an error message.
func shortKey(k string) string {
	if len(k) > 32 {
		return k[:32] + "..."
	}
	return k
}

// isTokenChar reports whether c is an RFC 9110 token character.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// timeHeaders is the headers DeliverAt and ExpiresAt take: one each
// when set.
func timeHeaders(m *Message) int {
	n := 0
	if !m.DeliverAt.IsZero() {
		n++
	}
	if !m.ExpiresAt.IsZero() {
		n++
	}
	return n
}

// validateTimes checks DeliverAt against ExpiresAt: a message due at or
// after it expires could never be handled.
func validateTimes(m *Message) error {
	if !m.DeliverAt.IsZero() && !m.ExpiresAt.IsZero() && !m.DeliverAt.Before(m.ExpiresAt) {
		return fmt.Errorf("%w: DeliverAt %s is not before ExpiresAt %s", ErrInvalidMessage,
			m.DeliverAt.UTC().Format(time.RFC3339Nano), m.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// withTimes returns m's headers with a DeliverAt still to come (after
// now) in HeaderDeliverAt and ExpiresAt in HeaderExpiresAt: a copy, the
// caller's map is its own.
func withTimes(m *Message, now time.Time) map[string]string {
	deliver := !m.DeliverAt.IsZero() && m.DeliverAt.After(now)
	if !deliver && m.ExpiresAt.IsZero() {
		return m.Headers
	}
	h := make(map[string]string, len(m.Headers)+2)
	maps.Copy(h, m.Headers)
	if deliver {
		h[backend.HeaderDeliverAt] = strconv.FormatInt(m.DeliverAt.UnixMilli(), 10)
	}
	if !m.ExpiresAt.IsZero() {
		h[backend.HeaderExpiresAt] = strconv.FormatInt(m.ExpiresAt.UnixMilli(), 10)
	}
	return h
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

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
	if maxHeaders := backend.MaxHeaders - expiryHeaders(m); len(m.Headers) > maxHeaders {
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

// expiryHeaders is the headers ExpiresAt takes: 1 when set.
func expiryHeaders(m *Message) int {
	if m.ExpiresAt.IsZero() {
		return 0
	}
	return 1
}

// withExpiry returns m's headers with ExpiresAt in HeaderExpiresAt: a
// copy, the caller's map is its own.
func withExpiry(m *Message) map[string]string {
	if m.ExpiresAt.IsZero() {
		return m.Headers
	}
	h := make(map[string]string, len(m.Headers)+1)
	maps.Copy(h, m.Headers)
	h[backend.HeaderExpiresAt] = strconv.FormatInt(m.ExpiresAt.UnixMilli(), 10)
	return h
}

// takeExpiry reads HeaderExpiresAt from delivered headers and returns the
// headers without it (a copy when it was there).
func takeExpiry(h map[string]string) (map[string]string, time.Time) {
	v, ok := h[backend.HeaderExpiresAt]
	if !ok {
		return h, time.Time{}
	}
	out := make(map[string]string, len(h)-1)
	for k, val := range h {
		if k != backend.HeaderExpiresAt {
			out[k] = val
		}
	}
	if len(out) == 0 {
		out = nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return out, time.Time{}
	}
	return out, time.UnixMilli(ms)
}

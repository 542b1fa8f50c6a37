// Package msgcheck holds the content rule every publish path applies
// before any I/O (bus.Publish and the outbox): message IDs, keys, headers,
// payload size and the DeliverAt/ExpiresAt pair. Its errors wrap
// ErrInvalidMessage (bus.ErrInvalidMessage) or ErrPayloadTooLarge
// (bus.ErrPayloadTooLarge).
package msgcheck

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/eventbus-go/bus/backend"
)

// ErrInvalidMessage is backend.ErrInvalidMessage (bus.ErrInvalidMessage).
var ErrInvalidMessage = backend.ErrInvalidMessage

// ErrPayloadTooLarge is bus.ErrPayloadTooLarge.
var ErrPayloadTooLarge = errors.New("payload too large")

// Fields are the parts of a message the content rule bounds.
type Fields struct {
	ID, Key string
	// IDGenerated says that ID is one the bus generated for the message
	// (msgid): valid by construction, it is not looked at.
	IDGenerated bool
	Headers     map[string]string
	PayloadLen  int
	MaxPayload  int
	// PayloadLimit says what sets MaxPayload and how to raise it, for
	// the error of a payload over it ("" says nothing more).
	PayloadLimit         string
	DeliverAt, ExpiresAt time.Time
}

// Check checks one message against the content rule and the limits. The
// error wraps ErrInvalidMessage or ErrPayloadTooLarge.
func Check(m Fields) error {
	if !m.IDGenerated {
		if err := validateID(m.ID); err != nil {
			return err
		}
	}
	if len(m.Key) > backend.MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, more than %d", ErrInvalidMessage, len(m.Key), backend.MaxKeyLen)
	}
	if !utf8.ValidString(m.Key) {
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalidMessage)
	}
	if m.PayloadLen > m.MaxPayload {
		if m.PayloadLimit == "" {
			return fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, m.PayloadLen, m.MaxPayload)
		}
		return fmt.Errorf("%w: %d bytes, over the limit of %d: %s", ErrPayloadTooLarge, m.PayloadLen, m.MaxPayload, m.PayloadLimit)
	}
	maxHeaders := backend.MaxHeaders
	if !m.DeliverAt.IsZero() || !m.ExpiresAt.IsZero() {
		if err := validateTimes(m.DeliverAt, m.ExpiresAt); err != nil {
			return err
		}
		maxHeaders -= timeHeaders(m.DeliverAt, m.ExpiresAt)
	}
	if len(m.Headers) > maxHeaders {
		return fmt.Errorf("%w: %d headers, more than %d", ErrInvalidMessage, len(m.Headers), maxHeaders)
	}
	if len(m.Headers) == 0 {
		return nil
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
	if VisibleASCII(id) {
		return nil
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: id has byte %#x at %d (visible ASCII only)", ErrInvalidMessage, c, i)
		}
	}
	return nil
}

// VisibleASCII reports whether every byte of s is in 0x21-0x7e. It tests
// eight bytes at a time, each eight read as one word: an ID is checked on
// every Publish.
func VisibleASCII(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	// A read-only view of s: the loads below are combined into one per
	// word, which the byte-wise reads of a string are not.
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	if len(b) < 8 {
		for _, c := range b {
			if c < 0x21 || c > 0x7e {
				return false
			}
		}
		return true
	}
	// The last word overlaps the ones before it when the length is not
	// a multiple of eight.
	last := binary.LittleEndian.Uint64(b[len(b)-8:])
	bad := (last-0x21*ones)&^last | (last + ones) | last
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		bad |= (w-0x21*ones)&^w | (w + ones) | w // a byte < 0x21 or >= 0x7f sets its high bit
		b = b[8:]
	}
	return bad&highs == 0
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
func timeHeaders(deliverAt, expiresAt time.Time) int {
	n := 0
	if !deliverAt.IsZero() {
		n++
	}
	if !expiresAt.IsZero() {
		n++
	}
	return n
}

// The times a message can carry (DeliverAt, ExpiresAt), in whole
// milliseconds: what int64 nanoseconds since the Unix epoch hold
// (time.Time.UnixNano), the narrowest of the carriers. The headers hold
// int64 milliseconds, Redis scores float64 milliseconds (exact to 2^53),
// PostgreSQL timestamptz 4713 BC to 294276 AD, and nats-server keeps
// schedules and redelivery times in int64 nanoseconds.
var (
	MinTime = time.UnixMilli(math.MinInt64 / int64(time.Millisecond)).UTC() // 1677-09-21T00:12:43.146Z
	MaxTime = time.UnixMilli(math.MaxInt64 / int64(time.Millisecond)).UTC() // 2262-04-11T23:47:16.854Z
)

// validateTimes checks that DeliverAt and ExpiresAt can be carried, and
// DeliverAt against ExpiresAt: a message due at or after it expires
// could never be handled.
func validateTimes(deliverAt, expiresAt time.Time) error {
	if err := checkTime("DeliverAt", deliverAt); err != nil {
		return err
	}
	if err := checkTime("ExpiresAt", expiresAt); err != nil {
		return err
	}
	if !deliverAt.IsZero() && !expiresAt.IsZero() && !deliverAt.Before(expiresAt) {
		return fmt.Errorf("%w: DeliverAt %s is not before ExpiresAt %s", ErrInvalidMessage,
			deliverAt.UTC().Format(time.RFC3339Nano), expiresAt.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// checkTime refuses a set time outside MinTime..MaxTime (sub-millisecond
// digits aside: they are cut, as the headers carry milliseconds).
func checkTime(field string, t time.Time) error {
	if t.IsZero() || !t.Before(MinTime) && t.Before(MaxTime.Add(time.Millisecond)) {
		return nil
	}
	return fmt.Errorf("%w: %s %s is outside %s..%s, the times a message can carry", ErrInvalidMessage,
		field, t.UTC().Format(time.RFC3339Nano), MinTime.Format(time.RFC3339Nano), MaxTime.Format(time.RFC3339Nano))
}

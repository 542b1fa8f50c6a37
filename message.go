package bus

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgid"
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
}

// NewMessage returns a message with payload and a fresh ID.
func NewMessage(payload []byte) *Message {
	return &Message{ID: msgid.New(), Payload: payload}
}

// Limits applied by Publish before any I/O. What Publish accepts, every
// backend carries byte-exact (a backend whose wire would alter a value
// encodes it); what it refuses, it refuses the same way on every backend,
// with an error wrapping ErrInvalidMessage or ErrPayloadTooLarge. With
// these bounds the whole message, headers included, is bounded before any
// I/O, so a batch is never half-written for a reason validation could see.
const (
	// MaxTopicLen is the longest topic in bytes.
	MaxTopicLen = 200
	// DefaultMaxPayload is the default payload limit (1 MiB).
	DefaultMaxPayload = 1 << 20
	// MaxIDLen is the longest message ID in bytes.
	MaxIDLen = 256
	// MaxKeyLen is the longest message key in bytes.
	MaxKeyLen = 1024
	// MaxHeaderKeyLen is the longest header key in bytes.
	MaxHeaderKeyLen = 256
	// MaxHeaders is the most headers a message may have.
	MaxHeaders = 64
	// MaxHeaderBytes bounds the headers of a message: the lengths of all
	// keys and values added up.
	MaxHeaderBytes = 16 << 10
)

// ReservedHeaderPrefixes are header key prefixes (compared without case)
// that the bus and its backends use; user headers may not start with them.
var ReservedHeaderPrefixes = []string{"bus-", "nats-"}

// Headers the bus sets on dead-lettered copies (see backend.NewDeadLetter).
const (
	HeaderDeadLetterReason  = backend.HeaderDeadLetterReason
	HeaderDeadLetterCode    = backend.HeaderDeadLetterCode
	HeaderDeadLetterTopic   = backend.HeaderDeadLetterTopic
	HeaderDeadLetterGroup   = backend.HeaderDeadLetterGroup
	HeaderDeadLetterAttempt = backend.HeaderDeadLetterAttempt
	HeaderDeadLetterID      = backend.HeaderDeadLetterID
	HeaderDeadLetterTime    = backend.HeaderDeadLetterTime
)

// ValidateTopic reports whether topic is a valid topic name. The error
// wraps ErrInvalidTopic.
func ValidateTopic(topic string) error {
	if topic == "" {
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	}
	if len(topic) > MaxTopicLen {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidTopic, len(topic), MaxTopicLen)
	}
	prevDot := true // a leading dot is an empty token
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		switch {
		case c == '.':
			if prevDot {
				return fmt.Errorf("%w: %q has an empty token", ErrInvalidTopic, topic)
			}
			prevDot = true
			continue
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == ':':
		default:
			return fmt.Errorf("%w: %q has character %q at %d (allowed: letters, digits, . _ - :)", ErrInvalidTopic, topic, c, i)
		}
		prevDot = false
	}
	if prevDot {
		return fmt.Errorf("%w: %q has an empty token", ErrInvalidTopic, topic)
	}
	return nil
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
	if len(m.Key) > MaxKeyLen {
		return fmt.Errorf("%w: key is %d bytes, more than %d", ErrInvalidMessage, len(m.Key), MaxKeyLen)
	}
	if !utf8.ValidString(m.Key) {
		return fmt.Errorf("%w: key is not valid UTF-8", ErrInvalidMessage)
	}
	if len(m.Payload) > maxPayload {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, len(m.Payload), maxPayload)
	}
	if len(m.Headers) > MaxHeaders {
		return fmt.Errorf("%w: %d headers, more than %d", ErrInvalidMessage, len(m.Headers), MaxHeaders)
	}
	total := 0
	for k, v := range m.Headers {
		if err := validateHeader(k, v); err != nil {
			return err
		}
		total += len(k) + len(v)
	}
	if total > MaxHeaderBytes {
		return fmt.Errorf("%w: headers are %d bytes, more than %d", ErrInvalidMessage, total, MaxHeaderBytes)
	}
	return nil
}

// validateID checks a caller's message ID (empty IDs are assigned before).
func validateID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty id", ErrInvalidMessage)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%w: id is %d bytes, more than %d", ErrInvalidMessage, len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: id has byte %#x at %d (visible ASCII only)", ErrInvalidMessage, c, i)
		}
	}
	return nil
}

func validateHeader(k, v string) error {
	if k == "" {
		return fmt.Errorf("%w: empty header key", ErrInvalidMessage)
	}
	if len(k) > MaxHeaderKeyLen {
		return fmt.Errorf("%w: header key is %d bytes, more than %d", ErrInvalidMessage, len(k), MaxHeaderKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			return fmt.Errorf("%w: header key %q has byte %#x at %d (token characters only)", ErrInvalidMessage, shortKey(k), k[i], i)
		}
	}
	for _, p := range ReservedHeaderPrefixes {
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

package bus

import (
	"fmt"
	"strings"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgid"
)

// Message is one event. Publish assigns ID when it is empty.
type Message struct {
	// ID is unique per message; Publish assigns a time-ordered UUID
	// (version 7) when it is empty. Backends that deduplicate use it.
	ID string
	// Key is an optional ordering or partition key.
	Key string
	// Headers are user metadata. Keys are HTTP token characters and must
	// not start with a reserved prefix (see ReservedHeaderPrefixes);
	// values must not contain CR, LF or NUL.
	Headers map[string]string
	// Payload is opaque bytes.
	Payload []byte
}

// NewMessage returns a message with payload and a fresh ID.
func NewMessage(payload []byte) *Message {
	return &Message{ID: msgid.New(), Payload: payload}
}

// Limits applied by Publish before any I/O.
const (
	// MaxTopicLen is the longest topic in bytes.
	MaxTopicLen = 200
	// DefaultMaxPayload is the default payload limit (1 MiB).
	DefaultMaxPayload = 1 << 20
	// MaxHeaderKeyLen is the longest header key in bytes.
	MaxHeaderKeyLen = 256
	// MaxIDLen is the longest message ID in bytes.
	MaxIDLen = 256
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

// validateMessage checks one message against the limits. reserved allows
// reserved header prefixes (for copies the bus itself makes).
func validateMessage(m *Message, maxPayload int, reserved bool) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalidMessage)
	}
	if len(m.ID) > MaxIDLen {
		return fmt.Errorf("%w: id is %d bytes, more than %d", ErrInvalidMessage, len(m.ID), MaxIDLen)
	}
	if len(m.Payload) > maxPayload {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, len(m.Payload), maxPayload)
	}
	for k, v := range m.Headers {
		if err := validateHeader(k, v, reserved); err != nil {
			return err
		}
	}
	return nil
}

func validateHeader(k, v string, reserved bool) error {
	if k == "" {
		return fmt.Errorf("%w: empty header key", ErrInvalidMessage)
	}
	if len(k) > MaxHeaderKeyLen {
		return fmt.Errorf("%w: header key is %d bytes, more than %d", ErrInvalidMessage, len(k), MaxHeaderKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if !isTokenChar(k[i]) {
			return fmt.Errorf("%w: header key %q has character %q (token characters only)", ErrInvalidMessage, k, k[i])
		}
	}
	if !reserved {
		for _, p := range ReservedHeaderPrefixes {
			if len(k) >= len(p) && strings.EqualFold(k[:len(p)], p) {
				return fmt.Errorf("%w: header key %q uses reserved prefix %q", ErrInvalidMessage, k, p)
			}
		}
	}
	if i := strings.IndexAny(v, "\r\n\x00"); i >= 0 {
		return fmt.Errorf("%w: header %q value has CR, LF or NUL at %d", ErrInvalidMessage, k, i)
	}
	return nil
}

// isTokenChar reports whether c is an RFC 9110 token character.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

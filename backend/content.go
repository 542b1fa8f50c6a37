package backend

import (
	"fmt"
	"unicode/utf8"
)

// The content rule: limits the bus applies in Publish before any I/O.
// What Publish accepts, every backend carries byte-exact (a backend whose wire would alter a value
// encodes it); what it refuses, it refuses the same way on every backend,
// with an error wrapping bus.ErrInvalidMessage or bus.ErrPayloadTooLarge. With
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

// ValidateTopic reports whether topic is a valid topic name. The error
// wraps ErrInvalidTopic (bus.ErrInvalidTopic).
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
			return badTopicChar(topic, i)
		}
		prevDot = false
	}
	if prevDot {
		return fmt.Errorf("%w: %q has an empty token", ErrInvalidTopic, topic)
	}
	return nil
}

// badTopicChar is the error of topic's character at byte offset i: it
// names the character typed (or the byte, in text that is not UTF-8) and
// its position counted in characters from 1.
func badTopicChar(topic string, i int) error {
	const allowed = "allowed: ASCII letters, digits, '.', '_', '-' and ':'"
	pos := utf8.RuneCountInString(topic[:i]) + 1
	r, size := utf8.DecodeRuneInString(topic[i:])
	if r == utf8.RuneError && size <= 1 {
		return fmt.Errorf("%w: %q has byte 0x%02x, not UTF-8 text, at character %d (%s)", ErrInvalidTopic, topic, topic[i], pos, allowed)
	}
	return fmt.Errorf("%w: %q has character %q at character %d (%s)", ErrInvalidTopic, topic, r, pos, allowed)
}

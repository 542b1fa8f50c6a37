package backend

import (
	"maps"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Headers of a dead-letter copy. The bus sets them when it dead-letters a
// delivery; a backend sets them through NewDeadLetter when it dead-letters
// an entry it cannot deliver (malformed, trimmed, oversized). User headers
// may not use the "bus-" prefix, so they never collide.
const (
	HeaderDeadLetterReason  = "bus-dlq-reason"  // human-readable reason
	HeaderDeadLetterCode    = "bus-dlq-code"    // machine-readable reason code (DeadLetterCode)
	HeaderDeadLetterTopic   = "bus-dlq-topic"   // the topic the message came from
	HeaderDeadLetterGroup   = "bus-dlq-group"   // the group that gave up on it
	HeaderDeadLetterAttempt = "bus-dlq-attempt" // the attempt that gave up
	HeaderDeadLetterID      = "bus-dlq-id"      // the original message ID
	HeaderDeadLetterTime    = "bus-dlq-time"    // when it was dead-lettered, RFC 3339 with nanoseconds, UTC
)

// HeaderReplayed is set on a message that the bus replayed from a
// dead-letter topic to its original topic, to the replay time in Unix
// nanoseconds. Backends that deduplicate by message ID take it into
// account, so a replay is not mistaken for a duplicate of the original
// publish.
const HeaderReplayed = "bus-replayed"

// HeaderExpiresAt carries bus.Message.ExpiresAt through the backend, in
// Unix milliseconds. The bus sets it on Publish and removes it on
// delivery; backends carry it as any header.
const HeaderExpiresAt = "bus-expires-at"

// HeaderDeliverAt carries bus.Message.DeliverAt through the backend, in
// Unix milliseconds; the bus sets it on Publish only for a time still to
// come, and removes it on delivery. A backend that can hold a message at
// the broker until then (Capabilities.Scheduling) reads it with
// HeaderTime; any other carries it as any header, and the bus gives a
// delivery that comes early back to the group until it is due.
const HeaderDeliverAt = "bus-deliver-at"

// DueTimes returns, for a batch with messages whose HeaderDeliverAt is
// still to come, each message's due time in Unix milliseconds (0: due
// now); nil when every message is due now, the common case, which costs
// a map lookup per message that has headers.
func DueTimes(msgs []*Message) []int64 {
	var due []int64
	var now int64
	for i, m := range msgs {
		if len(m.Headers) == 0 {
			continue
		}
		at, ok := HeaderTime(m.Headers, HeaderDeliverAt)
		if !ok {
			continue
		}
		if now == 0 {
			now = time.Now().UnixMilli()
		}
		if ms := at.UnixMilli(); ms > now {
			if due == nil {
				due = make([]int64, len(msgs))
			}
			due[i] = ms
		}
	}
	return due
}

// WithTimes returns h with deliverAt in HeaderDeliverAt when it is after
// now and expiresAt in HeaderExpiresAt when set (Unix milliseconds): a
// copy when it adds one, h itself otherwise, so the caller's map is never
// written. Publish paths that build SPI messages outside a Bus (a
// publish inside a caller's transaction) encode times with it as the bus
// does.
func WithTimes(h map[string]string, deliverAt, expiresAt, now time.Time) map[string]string {
	deliver := !deliverAt.IsZero() && deliverAt.After(now)
	if !deliver && expiresAt.IsZero() {
		return h
	}
	out := make(map[string]string, len(h)+2)
	maps.Copy(out, h)
	if deliver {
		out[HeaderDeliverAt] = strconv.FormatInt(deliverAt.UnixMilli(), 10)
	}
	if !expiresAt.IsZero() {
		out[HeaderExpiresAt] = strconv.FormatInt(expiresAt.UnixMilli(), 10)
	}
	return out
}

// HeaderTime returns the time in header key of h (HeaderDeliverAt,
// HeaderExpiresAt: Unix milliseconds), if it has a valid one.
func HeaderTime(h map[string]string, key string) (time.Time, bool) {
	v, ok := h[key]
	if !ok {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// IsDeadLetter reports whether m is a dead-letter copy (it carries the
// dead-letter headers NewDeadLetter sets).
func IsDeadLetter(m *Message) bool {
	_, ok := m.Headers[HeaderDeadLetterReason]
	return ok
}

// DeadLetterCode is the machine-readable reason a message was
// dead-lettered, carried in HeaderDeadLetterCode. Codes are snake_case,
// as are the observer's scopes, the lifecycle events and the metric
// attribute values; read a stored code with ParseDeadLetterCode.
type DeadLetterCode string

// Reason codes.
const (
	CodeMaxDeliveries DeadLetterCode = "max_deliveries" // attempts reached the subscription's max deliveries
	CodeRejected      DeadLetterCode = "rejected"       // the handler rejected it: Delivery.Reject, or a returned error marked with Permanent (bus.Reject)
	CodeMalformed     DeadLetterCode = "malformed"      // the backend could not decode the entry
	CodeOversized     DeadLetterCode = "oversized"      // the payload is over the consumer's max payload
	CodeLeaseLost     DeadLetterCode = "lease_lost"     // the lease could not be kept for the last attempt
	CodeExpired       DeadLetterCode = "expired"        // the message reached its ExpiresAt before it was handled
	CodeTrimmed       DeadLetterCode = "trimmed"        // the broker dropped the entry (retention, MAXLEN) before it was delivered
	CodeUndecodable   DeadLetterCode = "undecodable"    // a typed subscription's codec could not decode the payload, or does not read its content type
	CodeUnknownType   DeadLetterCode = "unknown_type"   // a typed router has no handler for the event type
	CodeHeld          DeadLetterCode = "held"           // parked: an earlier message of its key was dead-lettered by a subscription that holds failed keys
	CodeReleased      DeadLetterCode = "released"       // the head of a held key, given up when the key was released
)

// ParseDeadLetterCode returns the code a dead-letter copy carries in
// HeaderDeadLetterCode, tolerant of the spellings earlier versions
// stored: "max-deliveries" and "lease-lost" read as CodeMaxDeliveries and
// CodeLeaseLost, "permanent" as CodeRejected. Any other value is returned
// as it is (a code a newer version wrote stays readable), with surrounding
// space removed.
func ParseDeadLetterCode(s string) DeadLetterCode {
	s = strings.TrimSpace(s)
	switch s {
	case "max-deliveries":
		return CodeMaxDeliveries
	case "lease-lost":
		return CodeLeaseLost
	case "permanent":
		return CodeRejected
	}
	return DeadLetterCode(s)
}

// MaxDeadLetterReason is the longest reason text, in bytes, a dead-letter
// copy carries; longer texts are cut at a rune boundary.
const MaxDeadLetterReason = 1024

// DeadLetterInfo says where a dead-lettered message came from and why.
type DeadLetterInfo struct {
	Topic   string
	Group   string
	Attempt int
	Code    DeadLetterCode
	// Reason is a short human-readable text. It must not quote payload
	// bytes or field values read from the wire.
	Reason string
	// Time is when the message was dead-lettered; zero means now.
	Time time.Time
}

// NewDeadLetter returns the copy of m to store on a dead-letter topic: the
// same ID, key, payload and headers, plus the dead-letter headers from
// info. m is not modified; the copy shares m's payload slice. It is the one
// builder the bus and every backend use, so that every dead letter looks
// the same and can be listed and replayed the same way.
func NewDeadLetter(m *Message, info DeadLetterInfo) *Message {
	h := make(map[string]string, len(m.Headers)+7)
	maps.Copy(h, m.Headers)
	at := info.Time
	if at.IsZero() {
		at = time.Now()
	}
	h[HeaderDeadLetterReason] = cleanReason(info.Reason)
	h[HeaderDeadLetterCode] = string(info.Code)
	h[HeaderDeadLetterTopic] = info.Topic
	h[HeaderDeadLetterGroup] = info.Group
	h[HeaderDeadLetterAttempt] = strconv.Itoa(max(info.Attempt, 1))
	h[HeaderDeadLetterID] = m.ID
	h[HeaderDeadLetterTime] = at.UTC().Format(time.RFC3339Nano)
	return &Message{ID: m.ID, Key: m.Key, Headers: h, Payload: m.Payload, PublishedAt: at}
}

// cleanReason makes an error text a tidy one-line header value: valid
// UTF-8, control characters as spaces, at most MaxDeadLetterReason bytes.
func cleanReason(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > MaxDeadLetterReason {
		cut := MaxDeadLetterReason
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

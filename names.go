package bus

import "github.com/eventbus-go/bus/backend"

// The names below are defined in package backend, the interface a backend
// implements, and are the same values here: a program that uses the bus
// needs no import of backend. Each has one meaning on both sides, so
// errors.Is, type switches and comparisons match either name.

// Backend is what New wraps: a transport (inmemory, redisstream, nats) or
// one opened by Open from a URL.
type Backend = backend.Backend

// Capabilities is what a backend can do (Bus.Capabilities).
type Capabilities = backend.Capabilities

// Failure is one failed message of a Publish batch (PublishError.Failed):
// its position in the call, its ID and its error.
type Failure = backend.Failure

// StartFrom is where a new consumer group starts (WithStartFrom).
type StartFrom = backend.StartFrom

// Start positions of a new consumer group.
const (
	// StartNewest delivers only messages published after the group was
	// created. It is the default.
	StartNewest = backend.StartNewest
	// StartOldest delivers every message the topic still retains.
	StartOldest = backend.StartOldest
)

// SeekTarget is where Bus.SeekGroup moves a group: its oldest retained
// message, the end of the topic, or the first message published at or
// after a time.
type SeekTarget = backend.SeekTarget

// TopicInfo describes one topic (Bus.Topics).
type TopicInfo = backend.TopicInfo

// GroupInfo describes one consumer group of a topic (Bus.Groups).
type GroupInfo = backend.GroupInfo

// Figure is a count in TopicInfo and GroupInfo that a backend may not
// know; Known reports whether it is a count.
type Figure = backend.Figure

// DeadLetterCode is the machine-readable reason of a dead letter, in its
// HeaderDeadLetterCode header and DeadLetter.Code. Codes are snake_case,
// like the observer's scopes and the lifecycle events; DeadLetters and
// the bus command read the spellings earlier versions stored
// ("max-deliveries", "lease-lost", "permanent") as today's codes.
type DeadLetterCode = backend.DeadLetterCode

// Dead-letter codes.
const (
	CodeMaxDeliveries = backend.CodeMaxDeliveries // "max_deliveries": WithMaxDeliveries was reached
	CodeRejected      = backend.CodeRejected      // "rejected": Delivery.Reject, or the handler returned Reject(err)
	CodeExpired       = backend.CodeExpired       // "expired": the message reached its ExpiresAt before it was handled
	CodeTrimmed       = backend.CodeTrimmed       // "trimmed": the broker dropped the entry before it was delivered
	CodeLeaseLost     = backend.CodeLeaseLost     // "lease_lost": the lease could not be kept
	CodeMalformed     = backend.CodeMalformed     // "malformed": the backend could not decode the entry
	CodeOversized     = backend.CodeOversized     // "oversized": the payload was over the max payload
	CodeUndecodable   = backend.CodeUndecodable   // "undecodable": a typed subscription's codec could not decode the payload or does not read its content type
	CodeUnknownType   = backend.CodeUnknownType   // "unknown_type": a Router has no handler for the event type
	CodeHeld          = backend.CodeHeld          // "held": parked behind the dead-lettered head of its key (KeyHold)
	CodeReleased      = backend.CodeReleased      // "released": the head of a held key, given up by Bus.ReleaseKey
)

// Headers of a dead-letter copy, set by the bus or the backend that
// dead-lettered it.
const (
	HeaderDeadLetterReason  = backend.HeaderDeadLetterReason  // human-readable reason
	HeaderDeadLetterCode    = backend.HeaderDeadLetterCode    // DeadLetterCode
	HeaderDeadLetterTopic   = backend.HeaderDeadLetterTopic   // the topic the message came from
	HeaderDeadLetterGroup   = backend.HeaderDeadLetterGroup   // the group that gave up on it
	HeaderDeadLetterAttempt = backend.HeaderDeadLetterAttempt // the attempt that gave up
	HeaderDeadLetterID      = backend.HeaderDeadLetterID      // the original message ID
	HeaderDeadLetterTime    = backend.HeaderDeadLetterTime    // when, RFC 3339 with nanoseconds, UTC
)

// HeaderReplayed is set on a message replayed from a dead-letter topic
// (Bus.ReplayDeadLetters), to the replay time in Unix nanoseconds.
const HeaderReplayed = backend.HeaderReplayed

// ReservedHeaderPrefixes are the header key prefixes (compared without
// case) that the bus and its backends use; Message.Headers may not start
// with them.
var ReservedHeaderPrefixes = backend.ReservedHeaderPrefixes

// Limits of a message and a topic, checked by Publish before any I/O.
const (
	MaxTopicLen       = backend.MaxTopicLen       // bytes of a topic name
	MaxKeyLen         = backend.MaxKeyLen         // bytes of Message.Key
	MaxIDLen          = backend.MaxIDLen          // bytes of Message.ID
	MaxHeaders        = backend.MaxHeaders        // entries of Message.Headers
	MaxHeaderKeyLen   = backend.MaxHeaderKeyLen   // bytes of one header key
	MaxHeaderBytes    = backend.MaxHeaderBytes    // bytes of all header keys and values
	DefaultMaxPayload = backend.DefaultMaxPayload // bytes of Message.Payload unless WithMaxPayload
	MaxPartitions     = backend.MaxPartitions     // partitions of a topic (WithPartitions)
)

// MaxDelay is the longest delay the bus waits or asks a backend to wait
// (Nack, Snooze, Delivery.Nack, Delivery.Snooze, the retry backoff): a
// longer one waits MaxDelay.
const MaxDelay = backend.MaxDelay

// Errors of the inspection and partition calls, wrapped by the errors the
// root's methods return; use errors.Is.
var (
	// ErrNotFound: what an inspection call names is not there (a dead
	// letter's ID, a consumer group of SeekGroup).
	ErrNotFound = backend.ErrNotFound
	// ErrPartitionMismatch: a topic is created or published with a
	// partition count other than the one it has.
	ErrPartitionMismatch = backend.ErrPartitionMismatch
	// ErrStale: a Nack, Extend or dead-letter of a delivery whose lease ran
	// out; the call never touches a newer delivery of the message.
	ErrStale = backend.ErrStale
)

// ValidateTopic reports whether topic is a valid topic name: 1 to
// MaxTopicLen bytes of letters, digits and ". _ - :", with no empty
// "."-token. The error wraps ErrInvalidTopic. Every call that takes a
// topic checks it before any I/O; ValidateTopic checks one earlier (a
// flag, a config file).
func ValidateTopic(topic string) error { return backend.ValidateTopic(topic) }

// PartitionTopic returns the name under which partition p of a
// partitioned topic is stored and listed by Bus.Topics: "orders~3".
func PartitionTopic(topic string, p int) string { return backend.PartitionTopic(topic, p) }

// SplitPartitionTopic reports the topic and partition of a name that
// PartitionTopic made (as Bus.Topics lists them); ok is false for any
// other name.
func SplitPartitionTopic(name string) (topic string, p int, ok bool) {
	return backend.SplitPartitionTopic(name)
}

// Package lifecycle is the schema and the emitter of the bus's lifecycle
// events: one event per step of a delivery (received, succeeded, failed,
// retry scheduled, snoozed, dead-lettered, expired, replayed), and the
// bus's own decisions (scaled), written to an ordinary topic of the same
// backend when the bus is opened with bus.WithEvents.
//
// # Schema
//
// One event is one message on the events topic. Its payload is a JSON
// object (see Event for the fields; fields that do not apply are left
// out, durations are integers of nanoseconds, times RFC 3339 with
// nanoseconds in UTC). Its ID is a fresh message ID; its Key is the ID of
// the message the event is about, so that a key-ordered or partitioned
// events topic keeps one message's events in order and in one place, and
// so that a reader can find a message's history by the key alone. An
// event that is about no message (scaled) has the key "topic/group". The
// message carries no headers. Kind names are stable: new kinds may come,
// and readers skip the kinds they do not know.
//
// # Emitter
//
// The Emitter never blocks or slows its callers: Emit puts the event in a
// bounded buffer, or counts it as dropped when the buffer is full. One
// goroutine, owned by the bus and waited for by its Close, encodes the
// buffered events and publishes them in batches. The first drop is
// reported once to the observer; later drops are only counted.
package lifecycle

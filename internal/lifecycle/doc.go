// Package lifecycle is the schema and the emitter of the bus's lifecycle
// events: one event per step of a delivery (received, succeeded, failed,
// retry scheduled, snoozed, dead-lettered, expired, replayed), and the
// bus's own decisions (scaled), written to an ordinary topic of the same
// backend when the bus is opened with bus.WithEvents.
//
// # Schema
//
// An event is a JSON object (see Event for the fields; fields that do not
// apply are left out, durations are integers of nanoseconds, times RFC
// 3339 with nanoseconds in UTC). Kind names are stable: new kinds may
// come, and readers skip the kinds they do not know.
//
// # Format
//
// One message of the events topic holds up to MaxPackEvents events (and
// about MaxPackBytes) as JSON Lines: one event per line, each line ending
// in '\n'. Its headers are HeaderCount (how many events) and
// HeaderContentType (ContentType). The events of one subscription's
// member are packed by themselves: their lines leave out the topic, group
// and member, which the headers HeaderTopic, HeaderGroup and HeaderMember
// give (DecodeIn reads a line with them). Its ID is a fresh message ID and it
// has no key, so a partitioned events topic spreads the messages over its
// partitions; readers (Read, Scaling) read every partition and sort by
// time. A message of one event without a newline reads the same.
//
// # Emitter
//
// The Emitter never blocks or slows its callers: Emit encodes the event
// into a bounded buffer, or counts it as dropped when the buffer is full.
// A worker of a subscription emits through a Stage of its own, which
// hands its events to the buffer in groups; the emitter hands over every
// stage before each batch, so no event waits on a handler.
// One goroutine, owned by the bus and waited for by its Close, cuts the
// buffer into messages and publishes them in batches. The first drop is
// reported once to the observer; later drops are only counted.
package lifecycle

// Package backend is the service provider interface (SPI) that bus backends
// implement. Application code never uses it directly: it talks to *bus.Bus,
// which owns every semantic that is portable (ack modes, backpressure,
// lease keep-alive, retries, dead-lettering, observers, middleware,
// validation, ack batching and graceful shutdown). A backend owns only the
// primitives, in the same way a database/sql driver owns only connections
// and statements. This package imports only the standard library and the
// bus's observer package.
//
// # Contracts
//
// Each method's contract is in its own doc comment: Backend.Publish,
// Backend.Subscribe, Backend.Capabilities, Backend.Close,
// Subscription.Receive, Subscription.Ack, Subscription.Nack,
// Subscription.Close, and the optional Extender.Extend,
// DeadLetterer.DeadLetter and the Inspector methods. In short: Receive
// returns at most max messages and blocks about a second at most; every
// returned message starts a lease; Ack is idempotent; Nack never loses a
// message; a backend never retries on its own, and every call returns by
// its ctx's deadline, on a dead network too.
//
// # Leases and stale settlements
//
// A delivered message is leased to its member for the ack timeout. The bus
// keeps the lease of a running handler alive through Extender, so leases
// only run out when a process dies or hangs. Once a lease has run out the
// message may be delivered again, and the AckID of the old delivery is
// stale:
//
//   - Ack of a stale AckID settles the message if the group has not
//     settled it since, and is never an error;
//   - Nack, Extend and DeadLetter of a stale AckID return an error
//     wrapping ErrStale and never touch the newer delivery.
//
// # Closing
//
// Receive after Subscription.Close, or after Backend.Close, returns an
// error wrapping ErrClosed; Backend.Close ends the subscriptions still
// open. Neither Close takes a ctx, so each returns within a short bound
// that the backend documents.
//
// # Optional interfaces
//
// New capabilities arrive as optional interfaces found by type assertion,
// never by changing the interfaces above:
//
//   - Extender: restart a lease (Delivery.Extend and the bus's keep-alive).
//     Without it the bus cancels a handler whose lease it cannot keep,
//     with cause bus.ErrLeaseLost, before the lease runs out.
//   - DeadLetterer: store a dead-letter copy and settle the original
//     atomically.
//   - EachPublisher: publish a batch and report each message's outcome
//     as it arrives; PublishAsync then completes a message (and frees its
//     window room) on its own outcome, not its batch's.
//   - Inspector: list topics and groups with their figures, peek at and
//     delete retained messages (dead-letter list, replay and purge, and
//     the bus command). A figure the backend cannot know is Unknown.
//   - GroupLocker: one member of a group at a time consumes a topic
//     (key-ordered groups, and a partition's owner). A backend whose own
//     group assignment keeps each key on one member says so with
//     Capabilities.KeyOwnership instead, and its key-ordered members all
//     fetch.
//   - PendingLister: the deliveries a group handed out and has not
//     settled, with their keys, in log order: a key-ordered member that
//     takes the group lock over from a crashed one holds back only the
//     keys those deliveries carry (see docs/ordering.md).
//   - Partitioner: a topic's partition count, stored at the broker, and
//     the live members of a group; the bus builds partitioned topics out
//     of ordinary ones (PartitionTopic, PartitionOf, AssignPartitions).
//   - RetentionBounder: cap a topic's retention by age and length with no
//     subscriber running (the lifecycle events topic).
//   - SettledTrimmer: remove what every group settled when a subscription
//     closes.
//   - Pinger: one round trip to the broker (Bus.Ping, for readiness
//     probes).
//   - GroupDeleter: remove a consumer group and its state (broadcast
//     subscriptions, whose groups no process leaves behind).
//   - ResultStore: keep a handler's result under its message ID for a
//     ttl; ResultAcker, on a subscription, acks and stores it atomically.
//
// # Errors
//
// Errors wrapping ErrClosed mean the backend or subscription is closed;
// ErrStale, a settlement of a delivery whose lease ended; ErrInvalidOption,
// a bad option or URL parameter (the bus re-exports it). Errors marked
// with Permanent cannot be fixed by a retry: the bus ends the subscription
// on such a Receive error. A backend reports a background failure (reclaim,
// reconnect ...) once per outage and then its recovery, through
// observer.Outage, and never both logs and returns the same error.
// Dead-letter copies are built by NewDeadLetter, the one builder, with a
// reason code.
package backend

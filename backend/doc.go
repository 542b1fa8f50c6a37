// Package backend is the service provider interface (SPI) that bus backends
// implement. Application code never uses it directly: it talks to *bus.Bus,
// which owns every semantic that is portable (ack modes, backpressure,
// retries, dead-lettering, observers, middleware, validation, ack batching
// and graceful shutdown). A backend owns only the primitives below, in the
// same way a database/sql driver owns only connections and statements.
//
// # Backend
//
// Publish(ctx, topic, msgs) stores every message of the batch durably (as far
// as the backend's Capabilities say it is durable) before it returns nil. The
// bus has already validated the topic, assigned IDs and checked sizes. The
// slice and the messages belong to the caller after Publish returns (the
// bus reuses them for its next batch); a backend that keeps them must copy
// them. When only part of a batch fails,
// Publish returns a *BatchError that lists the indexes that failed; the
// other messages were stored. Publish must not retry: the portable layer and
// the application decide on retries. After Close, Publish returns an error
// that wraps ErrClosed. Publish is called concurrently.
//
// Subscribe(ctx, topic, cfg) creates (or joins) the consumer group cfg.Group
// on topic and returns a Subscription. If the group does not exist it is
// created at cfg.StartFrom; an existing group resumes where it stands. The
// ctx bounds only the setup I/O, never the life of the subscription.
// Subscribe is called concurrently.
//
// Capabilities() describes what the backend guarantees. It must be constant
// for the life of the Backend. The bus uses it to validate subscribe
// options and the conformance suite uses it to choose its cases.
//
// Close() releases the backend's resources. The bus calls it once, after
// every subscription has been closed. Calls after Close return ErrClosed.
//
// # Subscription
//
// Receive(ctx, max) returns at most max messages (max >= 1). It blocks for
// at most about one second and may return no message and a nil error; the
// bus calls it again. It must honour ctx cancellation promptly, returning
// ctx.Err(). A backend must never hold received messages locally beyond max:
// the bus has reserved exactly max units of capacity before the call, which
// is how backpressure reaches the broker. Every returned message starts a
// lease of cfg.AckTimeout; if it is not acked within the lease it is
// redelivered (to any member of the group) with Attempt+1. Malformed
// entries written by foreign producers must not be returned: the backend
// dead-letters them to cfg.DeadLetterTopic (when set), acks them, and
// reports them to cfg.Observer with observer.ScopeDecode. Receive is called
// from one goroutine at a time. The returned slice and Message structs stay
// valid until the next Receive on the same subscription, so a backend may
// reuse them then (the bus copies what it needs first); AckIDs stay valid
// until settled.
//
// Ack(ctx, ids) settles the messages for the group. It is idempotent:
// acking an id that is already acked, or whose lease moved on, is not an
// error. The bus batches acks and calls Ack with a detached ctx during
// shutdown so acks are flushed.
//
// Nack(ctx, id, delay) makes the message available again to the group after
// delay (0 = at once), with Attempt+1. A backend without NackDelay in its
// Capabilities may redeliver earlier than delay but never loses the message.
// Nack must be atomic: a crash at any point leaves the message either still
// pending or scheduled, never lost.
//
// Close() stops the subscription. A Receive in progress returns promptly.
// Unacked messages stay pending and are redelivered after their lease.
// Ack, Nack and the optional methods may be called concurrently with each
// other and with Receive.
//
// # Optional interfaces
//
// New capabilities arrive as optional interfaces that a Subscription may
// implement, found by type assertion, never by changing the interfaces
// above:
//
//   - Extender: restart the lease of a message (Delivery.Extend). Without it
//     Delivery.Extend returns bus.ErrUnsupported.
//   - DeadLetterer: move a message to the dead-letter topic and settle it in
//     one atomic step. Without it the bus publishes a copy to the
//     dead-letter topic and then acks the original, which can leave a
//     duplicate in the dead-letter topic after a crash but never loses it.
//
// # Errors
//
// Errors that wrap ErrClosed mean the backend or subscription is closed.
// Every other error is reported by the bus to the observer (for background
// calls) or returned to the application (for Publish); the backend must not
// log and return the same error.
package backend

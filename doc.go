// Package bus gives applications one Publisher/Subscriber API over several
// event backends, chosen by configuration: Redis Streams, NATS (JetStream
// and core) and an in-process memory backend.
//
// # Opening a bus
//
// Open picks the backend from a URL scheme ("mem://", "redis://",
// "nats://"); backends register their schemes with Register from init, so
// a blank import links one in. New wraps a Backend directly.
//
// # Semantics
//
// The bus, not the backend, owns the semantics: ack modes, backpressure,
// retries with backoff, dead-lettering, observers, middleware, validation,
// ack batching and graceful shutdown. A backend implements the primitives
// of package backend and proves itself with package conformance.
//
// Ack timeout is a lease in every ack mode: a delivery not settled within
// it is redelivered with Attempt+1. Capacity (WithMaxInFlight, WithLimiter)
// is acquired before the backend is asked for messages, so nothing waits in
// a local buffer while its lease runs.
//
// # Publishing
//
// Publish validates every message before any I/O and returns when the
// backend stored the batch. Concurrent Publish calls to one topic are
// combined into backend batches while the topic is busy (see
// PublishBatching); a call alone goes straight to the backend.
//
// # Errors
//
// Errors returned to callers wrap the sentinels in errors.go. Errors with no
// caller (handler failures, ack flushes, reclaims ...) go to the observer
// set with WithObserver, once.
package bus

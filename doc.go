// Package bus gives applications one Publisher/Subscriber API over several
// event backends, chosen by configuration: Redis Streams, NATS (JetStream
// and core), PostgreSQL and an in-process memory backend.
//
// # Opening a bus
//
// Open picks the backend from a URL scheme ("mem://", "redis://",
// "nats://", "postgres://"); backends register their schemes with Register
// from init, so a blank import links one in. New wraps a Backend directly.
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
// # Typed topics
//
// NewTopic declares a topic once with its Go type and Codec (JSON by
// default); its Publish, PublishEvents, PublishAsync and Subscribe are a
// thin layer over the untyped API, and a Router routes several event
// types of one topic to a handler each. A typed subscription decodes
// each delivery before its middleware and handler run; one that does not
// decode is dead-lettered with code undecodable. WithCloudEvents writes
// and reads CloudEvents attributes in a protocol binding's binary mode.
//
// # Errors
//
// Errors returned to callers wrap the sentinels in errors.go. Errors with no
// caller (handler failures, ack flushes, reclaims ...) go to the observer
// set with WithObserver, once.
//
// # Inside a subscription
//
// The life of a delivery is written in this package, unexported, as
// gocloud.dev/pubsub keeps its subscription next to its portable API:
// a reader, or a tool, follows one delivery from the backend's Receive to
// its Ack through plain method calls, with no function value between
// them. The handler (inside its middleware) and the retry backoff are the
// only function values on the way, and they are the user's. A delivery is
// one record (record.go), allocated in slabs per fetched batch: the
// public Delivery inline, which points back at its record (so a copy of a
// Delivery settles the same record), and the state of its life.
//
// A delivery's states, and the outcome (Delivery.Outcome) each ends in:
//
//	Receive ─► fetched (consumer.fetch, consumer.dispatch)
//	             │ past max deliveries, expired, oversized ─► dead-lettered
//	             │ before its DeliverAt (snooze.go) ────────► released
//	             ▼
//	           waiting for its key (keys.go; WithKeyOrdering only)
//	             │ lease lost while waiting ───────────────► lease lost
//	             │ group lock passed on, or Close ─────────► released
//	             ▼ its turn (dispatch.go: a worker takes it)
//	           running (settle.go: consumer.process, the handler)
//	             │ a typed subscription's decode fails ────► dead-lettered
//	             │ handler verdict or settlement ──────────► settled:
//	             │     acked | nacked (a keyed head waits for its retry
//	             │     in its key's line, as a new record) | dead-lettered
//	             │     or dropped
//	             │ cancelled by the shutdown ──────────────► released
//	             ▼ AckManual, returned unsettled
//	           waiting for settlement (manuallease.go)
//	             │ settled ────────────────────────────────► settled
//	             └ lease ran out ──────────────────────────► lease lost
//
// Released is OutcomeNacked without counting an attempt; lease lost is
// OutcomeLeaseLost (the broker delivers it again); dead-lettered is
// OutcomeDeadLettered, or OutcomeDropped with dead-lettering off. An ack
// goes to the acker (acker.go), which batches it into a backend Ack.
//
// A subscription to one stored topic (a consumer; a partitioned topic
// has one per owned partition) has these locks, none held across
// backend I/O:
//
//   - consumer.mu: the state few deliveries need (deliveryExt: settle
//     hooks, dead-letter code, moved lease ends, the lease keeper's
//     records) and the heap of AckManual deliveries waiting for
//     settlement;
//   - consumer.closeMu: the shutdown's state and Err;
//   - dispatcher.mu (with its cond): the queue of deliveries, the worker
//     counts, the stall check and the registry of what each worker runs;
//   - acker.mu: the acker's own buffer and its list of workers' buffers;
//     ackBuf.mu, one per worker: that worker's acks;
//   - the in-flight slots' lock (slots.Pool), and with key ordering the
//     waiting set's;
//   - keyLines.mu, with key ordering: each key's head, the deliveries
//     waiting behind it and its retry;
//   - groupLock.mu, with a group lock: whether the member owns the group
//     and the ctx of its Receives.
//
// Where two are held at once, dispatcher.mu is taken before acker.mu
// (a new worker registers its buffer), and keyLines.mu before
// dispatcher.mu (a key's next delivery is queued).
//
// Its goroutines: the fetch loop (consumer.fetch); the acker
// (acker.run); up to max in flight dispatcher workers, started on demand;
// the lease keeper (leaseKeeper.run) where handlers run under a lease,
// with one short-lived goroutine per extension in progress; the group
// lock's (groupLock.run) with key ordering on a backend.GroupLocker; and
// timers: the dispatcher's stall check, the AckManual lease heap's, and
// one per key whose head waits for its retry. A shutdown that the
// Subscribe ctx or a backend failure starts runs on a goroutine the
// bus's Close waits for.
package bus

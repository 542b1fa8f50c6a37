// Package inmemory is the in-process bus backend. It is a real backend,
// not a test double: topics are retained logs, consumer groups have
// cursors, deliveries have leases and attempt counts, nacks can be
// delayed, and memory stays bounded. It is what "mem://" opens.
//
//	be, err := inmemory.New(nil) // or bus.Open(ctx, "mem://")
//
// Nothing survives the process: a Backend is for tests, for development,
// and for services that pass events between their own goroutines.
//
// # Brokers and URLs
//
// A broker holds the topics. New and "mem://" create a private broker
// that only the returned Backend sees. "mem://name" opens the process-wide
// broker called name; every OpenURL of that name shares it (so two buses in
// one process can talk), and it is freed when the last Backend using it is
// closed. Query parameters set Options (max_backlog, max_backlog_bytes,
// backlog_policy), as in "mem://?max_backlog=10000&backlog_policy=error".
// An unknown parameter is an error.
//
// # Delivery semantics
//
// Delivery is at-least-once per consumer group.
//
//   - Each topic is a log: Publish appends a batch atomically, in order,
//     and the entries get consecutive offsets.
//   - Each consumer group has a cursor into the log. Every group gets
//     every entry (fan-out); the members of one group share them: each
//     Receive takes the next entries, so an entry goes to one member.
//   - A group is created by the first Subscribe that names it, at the
//     newest offset (StartNewest) or at the oldest entry the topic still
//     retains (StartOldest). An existing group resumes where it stands; a
//     second Subscribe with the same group joins it. Groups live as long as
//     the broker, with or without members: entries keep accumulating for a
//     group nobody reads until the backlog limit is reached, and then
//     Publish to that topic waits or fails (see below).
//   - Every delivery holds a lease of the subscriber's ack timeout and
//     carries its attempt number (1 on the first delivery). A lease that
//     runs out makes the entry available to any member of the group again,
//     with Attempt+1. Nack ends the lease and makes the entry available
//     again after its delay, with Attempt+1. Release (backend.Releaser,
//     used by the bus for deliveries a shutdown cancelled) makes it
//     available at once with the same Attempt. Receive hands out due
//     redeliveries before new entries.
//   - The AckID of a delivery names that delivery only. Acking or nacking
//     an id whose lease already ended (settled, or ran out and handed to
//     another member) does nothing; Extend of such an id returns an error
//     wrapping backend.ErrStale.
//   - DeadLetter appends the copy to the dead-letter topic and settles the
//     original in one step, under the locks of both topics.
//   - With a single member, first deliveries come in publish order.
//   - Received Headers are a copy per delivery. Received Payloads are
//     shared by every delivery of the entry and must not be modified.
//
// Leases and delayed nacks need no timer per message: leases granted with
// one ack timeout expire in the order they were granted, so each group
// keeps them in a queue per timeout and looks only at its front; delayed
// nacks sit in a heap per group. Receive checks both and, when it has to
// wait, sleeps until the earliest of them, a publish, or its one-second
// limit. The backend runs no goroutine of its own.
//
// # Memory and the backlog
//
// An entry's message data is freed as soon as every group has settled it
// (acked, dead-lettered, or, for groups created after it with
// StartNewest, never owed). The backlog of a topic is its retained
// entries: those some group has not settled yet. Two limits cap it:
// Options.MaxBacklog entries (default 50,000) and Options.MaxBacklogBytes
// (default 32 MiB, counting payload, ID, key and headers plus 256 bytes of
// bookkeeping per entry). A Publish whose batch does not fit waits for
// room (BacklogWait, the default, honouring ctx) or fails with an error
// wrapping ErrBacklogFull (BacklogError). A batch larger than either
// limit always fails. DeadLetter applies the same limits to the
// dead-letter topic.
//
// A topic that has no group yet keeps the newest entries within the
// limits and drops older ones (counted in TopicStats.Dropped), so
// publishing with no subscriber never blocks and never grows memory
// without bound. The first group takes over these entries when it starts
// from the oldest, and drops them when it starts from the newest. The
// default dead-letter topic usually has no group, so it keeps the newest
// dead letters within the limits until a group subscribes to it.
// BoundRetention (the bus's lifecycle events topic) caps a topic with no
// group further, by length and age, at each publish.
//
// An entry stuck unsettled (for instance nacked with a long delay) does
// not hold memory of the entries after it: settled entries are freed
// individually. Once the log window grows past twice MaxBacklog, entries
// already received by every group leave the log and live on in their
// leases and redelivery queues only; a group created later with
// StartOldest no longer sees them.
//
// # Capabilities
//
//	Name            "mem"
//	ConsumerGroups  true
//	Persistent      false  (nothing survives the process)
//	Redelivery      true   (leases and nacks)
//	NackDelay       true   (a delayed nack is held for its delay)
//	Ordered         true   (one member receives first deliveries in order)
//	StartOldest     true
//	Extend          true   (Subscription implements backend.Extender)
//	MaxPayload      0      (no limit of its own)
//
// Subscriptions also implement backend.DeadLetterer and
// backend.PendingLister (the group's leases, due redeliveries and delayed
// nacks, exact, in log order).
//
// # Concurrency
//
// A Backend and its Subscriptions are safe for concurrent use; Receive is
// called from one goroutine at a time per Subscription. Each topic has one
// lock, taken once per Publish batch, Receive batch and Ack batch. A
// Publish that finds the lock held does not wait for it: it counts its
// batch against the backlog limits and leaves it in the topic's inbox,
// which the holder appends to the log before it lets go, so the batch is
// in the log before anyone can look for it. A batch that does not fit in
// the backlog, or that goes to a topic without a group, waits for the
// lock and is stored under it, as every batch is when the lock is free.
// A publisher that is ahead of a topic's groups (its backlog is past an
// eighth of either limit, or past 1,024 entries, 256 when the process
// runs on a single processor) yields its processor once after each
// Publish, so that on a busy machine the subscriptions get to run before
// it publishes more.
// Close makes blocked Receive and Publish calls return, and later calls
// return errors wrapping backend.ErrClosed.
package inmemory

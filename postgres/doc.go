// Package postgres is the PostgreSQL backend of the bus, built on
// github.com/jackc/pgx/v5. It is tested on PostgreSQL 15.
//
// Link it in and open it by URL:
//
//	import _ "github.com/eventbus-go/bus/postgres"
//
//	b, err := bus.Open(ctx, "postgres://bus:secret@127.0.0.1:5432/app")
//
// or build it over a pool of your own with [New]. Both create the schema
// first ([Migrate], idempotent; `bus postgres migrate` runs it from the
// command line) unless told not to. Messages can also be published inside
// the application's own transaction with [PublishTx] (pgx) or
// [PublishSQL] (database/sql): subscribers receive them when it commits.
//
// # URL
//
// postgres:// and postgresql:// URLs carry user, password, host, port and
// database as libpq does. Backend parameters are block, dedup_window,
// max_payload, retention, trim_interval, channel and migrate (see
// [OpenURL]); every other parameter is pgx's (pool_max_conns, sslmode,
// application_name ...).
//
// # Tables
//
// Every table is named bus_*; [Schema] returns the SQL.
//
//	bus_topics      one row per topic: its partition count
//	bus_messages    the log of every topic: (topic, seq) is the key, seq
//	                one identity for all topics; id, key, headers, payload,
//	                published_at, and visible_at (the DeliverAt, or when
//	                the row was written)
//	bus_groups      one row per consumer group (topic, name) with an id
//	bus_deliveries  one row per message a group has not settled:
//	                (group_id, seq), visible_at (when a member may fetch
//	                it), n (deliveries so far: names the current one),
//	                attempt, leased, lease_by (the fetch that leased it)
//	bus_dedup       caller-set IDs published within the dedup window
//	bus_locks       group locks (key-ordered groups, partition owners)
//	bus_members     live members of partitioned groups, and each
//	                subscription of a process (topic '#' and the group's
//	                id), renewed every 5 s and counting for 15 s
//
// Two partial indexes on bus_deliveries, (group_id, visible_at, seq)
// where n = 0 and (group_id, visible_at) where n > 0, keep a fetch
// O(batch): it reads the first due rows of each and never walks past
// leased rows or messages held for later. Delayed messages, nacked ones
// and leased ones wait in the same rows, apart from the due ones by their
// visible_at.
//
// # Delivery semantics
//
// At-least-once, with every primitive a statement:
//
//   - Publish is one round trip: a pipelined transaction that takes the
//     topic's shared advisory lock and then, in one INSERT with CTEs,
//     writes the messages (unnest of arrays), one bus_deliveries row per
//     message and group, the caller-set IDs into bus_dedup, and
//     pg_notify(channel, topic) when a row is due now. Concurrent
//     publishers share the lock; a new group takes it exclusively, so it
//     sees every message whose writer did not see it.
//   - Subscribe creates the group when missing (StartOldest: with a
//     delivery row for every retained message) and joins it. It waits
//     (at most 2s, and within its ctx) until the Backend's listener
//     listens, so that what is published right after it starts is
//     notified to it.
//   - Receive leases up to max due rows in one statement: SELECT ... FOR
//     UPDATE SKIP LOCKED from the redeliveries first (n > 0, so the head
//     of a key whose member died comes back before what follows it), then
//     the first deliveries in due order; UPDATE n, attempt, leased,
//     visible_at = now + ack timeout; join the messages. Members never
//     wait on each other's rows. With nothing due it waits for a
//     notification of the topic (one LISTEN connection per Backend,
//     outside the pool), for the group's next due row, or for Options.Block
//     (1s), whichever comes first: an idle consumer gets a new message a
//     few milliseconds after its commit, and polls once a Block when
//     notifications are lost (the listener reconnects with backoff and
//     wakes every subscription when it does).
//   - A fetch whose reply was lost (a cancelled ctx, a dead connection)
//     may have committed. Each fetch tags the rows it leases with a random
//     lease_by; after a failed fetch the next Receive first hands out the
//     rows still leased under that tag, with their attempt unchanged,
//     before anything newer.
//   - Ack deletes the group's rows (DELETE ... seq = ANY($ids)): one
//     statement per flush. A stale Ack still settles.
//   - Nack, Release and Snooze set visible_at = now + delay and leased =
//     false (Release and Snooze also take one off attempt: not counted);
//     Extend sets visible_at = now + ack timeout. Each acts only while
//     the row is still this delivery (n), leased and within its lease;
//     otherwise it changes nothing and returns backend.ErrStale. The
//     subscriptions of the process are woken to re-read the next due time,
//     and a delay shorter than Options.Block is notified on the topic
//     after the commit, so members in every process re-read it: a delay
//     ends on time to a few milliseconds. (A longer one is read by the
//     next poll, which comes before it ends.)
//   - Leases are per delivery: a member's ack timeout applies to what it
//     fetched, and a member never changes another's lease, so members
//     with different ack timeouts can share a group.
//   - DeadLetter deletes the delivery row and writes the copy to the
//     dead-letter topic in one transaction: a stale id writes nothing.
//   - A message deleted while a group held it (Inspector.Delete,
//     DeleteTopic) is settled and reported with observer.ScopeReclaim; a
//     row whose headers do not decode is dead-lettered (or acked without
//     a dead-letter topic) and reported with observer.ScopeDecode.
//   - Subscription.Close does no I/O: what it holds comes back after its
//     lease. The bus releases the deliveries whose handlers a shutdown
//     cancelled first (Release), so they come back at once, uncounted.
//   - Times are the server's (clock_timestamp()), so processes with
//     skewed clocks agree on leases, delays and locks.
//
// # Idempotent publish
//
// A message whose ID the caller set is written only if its ID (with the
// replay time of a replayed dead letter) is not in bus_dedup for the
// topic within Options.DedupWindow (two minutes): INSERT ... ON CONFLICT
// DO UPDATE ... WHERE older than the window, RETURNING what was new.
// IDs the bus generated are never recorded. The trimmer deletes records
// older than the window.
//
// # Retention
//
// RetainSettled (the default) deletes, every Options.TrimInterval, the
// messages of each subscribed topic below the lowest seq any group still
// holds a delivery row for, in one statement (so a message committed
// meanwhile is seen with its delivery rows or not at all), and only on
// topics with groups: a message some group has not settled is never
// deleted, and a topic nobody consumes (a dead-letter topic) keeps
// everything. RetainAll never deletes.
//
// # Key order and partitions
//
// backend.GroupLocker is a row of bus_locks taken or renewed by one
// INSERT ... ON CONFLICT DO UPDATE WHERE the holder is the caller or the
// lock ran out (the server's clock); backend.Partitioner keeps the count
// in bus_topics (set once, by the first caller) and the live members in
// bus_members. PublishTx takes a transaction lock on each key's hash, so
// a key's messages get their seq and due time in the order their
// transactions commit.
//
// # Deadlines
//
// Every call runs its statements under its ctx: pgx cancels a statement
// whose ctx ends and closes the connection when the server does not
// answer. Backend.Close stops the listener and the trimmer within two
// seconds and closes the pool when the backend opened it.
//
// # Errors
//
// Receive marks with backend.Permanent what no retry fixes: a missing
// table, function or column (the schema is not migrated), a missing
// privilege, failed authentication, an unknown database. Connection
// errors, timeouts, deadlocks, serialization failures and a server
// shutting down are transient.
//
// # Capabilities
//
// ConsumerGroups, Persistent, Redelivery, NackDelay, Ordered (one member
// receives first deliveries in publish order), StartOldest, Extend and
// Scheduling (DeliverAt is the row's visible_at) are all true. MaxPayload
// is Options.MaxPayload (64 MiB by default). Subscriptions implement
// backend.Extender, Releaser, Snoozer and DeadLetterer; the Backend
// implements Inspector (Consumers counts the group's subscriptions whose
// bus_members row is live: one that closed stops counting at once, one
// whose process died within 15 s; OldestPending is unknown: a delivery
// row keeps when its lease ends, not when it began), TopicDeleter,
// GroupSeeker (in-flight deliveries of a sought group are dropped),
// GroupLocker and Partitioner.
package postgres

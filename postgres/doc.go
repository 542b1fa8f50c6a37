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
// database as libpq does; the host and the database are required (libpq's
// defaults are never assumed). Backend parameters are block, dedup_window,
// max_payload, retention, trim_interval, channel and migrate; the others
// are the documented connection and pool parameters of libpq and pgx
// (pool_max_conns, sslmode, application_name ...), and server settings go
// in libpq's options parameter (see [OpenURL] for the list). A URL
// without a host or a database, any other parameter and a value out of
// range are refused before any I/O. connect_timeout (seconds) bounds each
// connection, and the open's connection and first answer together: 10 s
// unless the URL sets it ([DefaultConnectTimeout]), whatever the ctx.
//
// # Tables
//
// Every table is named bus_*; [Schema] returns the SQL (schema v4).
// Migrate brings a database of schema v2 or v3 to v4 (it adds bus_leases
// and bus_results; the rows of v2 keep their meaning) and refuses one
// that holds the first
// layout (schema v1) with [ErrOldSchema]. An older process does not see
// what bus_leases holds, so a trigger on bus_messages refuses any delete
// whose transaction did not set bus.schema to 3 (every delete of this
// package does): an older process left running publishes and consumes
// (a lease that runs out comes back through a process of this release),
// but its trim and deletes fail with an error instead of dropping a
// leased message. Stop the older processes to let their errors end.
//
//	bus_topics      one row per topic: its partition count and its floor
//	                (the least ord a message written to it gets)
//	bus_messages    the log of every topic: seq one identity for all
//	                topics (it alone names a message), ord the writing
//	                transaction's id (xid8, raised to the topic's floor),
//	                id, key, headers, payload, published_at, and
//	                visible_at (the DeliverAt, or when the row was written)
//	bus_groups      one row per consumer group (topic, name) with an id
//	                and its cursor (cur_ord, cur_seq): the last message of
//	                the log the group has passed
//	bus_leases      one row per fetch that leased first deliveries:
//	                (group_id, lease_by: the fetch's tag), visible_at
//	                (when the lease ends), fetched (the seqs, in delivery
//	                order), ords (their messages' ords), pending (the
//	                seqs not settled yet)
//	bus_deliveries  one row per message a group has passed and not
//	                settled, but for those pending in a lease:
//	                (group_id, seq), visible_at (when a member may fetch
//	                it), n (deliveries so far: names the current one; 0
//	                for a first delivery waiting for its DeliverAt),
//	                attempt, leased, lease_by (the fetch that leased it)
//	bus_keyord      per topic and key hash, the ord PublishTx last gave
//	                the key
//	bus_dedup       caller-set IDs published within the dedup window
//	bus_locks       group locks (key-ordered groups, partition owners)
//	bus_members     live members of partitioned groups, and each
//	                subscription of a process (topic '#' and the group's
//	                id), renewed every 5 s and counting for 15 s
//
// A group reads the log through its cursor: the primary key (topic, ord,
// seq) of bus_messages takes a fetch straight to the messages after it,
// and a delivery row (which carries the message's ord) or a lease (which
// carries its messages' ords) to its messages. A publish writes the
// message rows only. A fetch leases the first deliveries it takes with
// one bus_leases row, whatever their number; delivery rows exist only for
// what is redelivered, given back, moved out of a lease by a settlement
// other than Ack, or waiting for its DeliverAt, so they are few and
// short-lived. Two partial indexes on bus_deliveries, (group_id,
// visible_at, seq) where n = 0 and (group_id, visible_at) where n > 0,
// find the waiting rows and the redeliveries that came due; one on
// bus_leases, (group_id, visible_at), the leases that ran out.
//
// # Commit order
//
// seq is drawn when a row is written, and transactions commit in another
// order, so a cursor over seq would pass a message whose transaction
// commits late (PublishTx holds the caller's transaction open as long as
// the caller likes). The cursor runs over (ord, seq) instead, and a fetch
// takes only messages whose ord is below the xmin of its snapshot
// (pg_snapshot_xmin(pg_current_snapshot())): every transaction with a
// smaller id has ended, so no message can commit behind the cursor later,
// and every message of such a transaction that committed is visible.
// ord is never below the writer's own transaction id; raising it (to the
// topic's floor, to a key's last ord) keeps that true.
//
// The cost is liveness: a transaction that holds a transaction id (one
// that has written anything) anywhere in the cluster holds back the
// delivery of every message written after it started, on every topic,
// until it ends. Keep writing transactions short (an application's own,
// PublishTx's included); a consumer whose messages wait behind one polls
// every few to 32 milliseconds until they are released.
//
// # Delivery semantics
//
// At-least-once, with every primitive a statement:
//
//   - Publish is one statement, a transaction of its own: an INSERT
//     with CTEs that takes the topic's shared advisory lock and then
//     writes the messages (unnest of arrays; the keys, headers and due
//     times only when some message of the batch has one) with the
//     transaction's id
//     (raised to the topic's floor) as their ord, the caller-set IDs
//     into bus_dedup (a batch without any leaves that step out), and
//     pg_notify(channel, topic) when the topic has a group. Every write
//     of the statement, and the assignment of its transaction's id,
//     comes after the lock. Concurrent publishers share the lock; a new
//     group takes it exclusively, so a publish either commits before the
//     group's snapshot (its messages lie before the group's start) or
//     gets a transaction id at or above the floor the group set (its
//     messages lie after it). A publish that waited for a new group may
//     not see it (its snapshot is older than the lock) and then sends no
//     notification: the group's members find its messages by their poll.
//     Only a publish that may send the topic's notification (one per
//     topic and 5ms in a process), or that has caller-set IDs, also
//     records the topic in bus_topics and reads whether it has a group;
//     the others run a lean INSERT
//     that takes the lock and writes the messages, nothing else (their
//     ord needs no floor: their id is assigned after the lock), and ask
//     for a notification after their commit unless the last publish that
//     read the groups found none.
//   - Subscribe creates the group when missing and joins it. StartOldest
//     starts its cursor before every message. StartNewest raises the
//     topic's floor to the first transaction id not yet assigned (the
//     xmax of its snapshot, under the topic's exclusive lock) and starts
//     the cursor there: what commits later gets an ord at or above the
//     floor, even from a transaction that started earlier. It waits (at
//     most 2s, and within its ctx) until the Backend's listener listens,
//     so that what is published right after it starts is notified to it.
//   - Receive leases up to max messages in one round trip: a pipelined
//     transaction of two statements. The first turns the group's leases
//     that ran out into delivery rows (DELETE ... RETURNING feeding an
//     INSERT: one leased row per seq still pending, n = 1, its lease
//     over), so that they come back as redeliveries. The second locks
//     the group's row (the fetches of a group take turns at its cursor),
//     takes the redeliveries that came due first (n > 0, so the head of
//     a key whose member died comes back before what follows it), then
//     the waiting first deliveries that came due, both FOR UPDATE SKIP
//     LOCKED, then the messages after the cursor in (ord, seq) order that
//     the snapshot admits; it leases those that are due with one
//     bus_leases row tagged by the fetch (until now + ack timeout), writes
//     a waiting row (n = 0) for each whose DeliverAt is ahead, moves the
//     cursor past them, updates the redeliveries (n, attempt, leased,
//     visible_at = now + ack timeout) and returns them all with their
//     messages; an AckID carries the lease's tag (0 for a delivery row).
//     Members never wait on each other's rows. After a fetch that took
//     all it found (fewer than the bus asked for), the next one first
//     waits for a notification of the topic, until 5ms after that fetch
//     started at most: a stream of small publishes is fetched in a few
//     large fetches rather than one per commit. With nothing due it
//     waits for a notification of the topic (one LISTEN
//     connection per Backend, outside the pool), for the group's next due
//     row, or for Options.Block (1s), whichever comes first: an idle
//     consumer gets a new message a few milliseconds after its commit,
//     and polls once a Block when notifications are lost (the listener
//     reconnects with backoff and wakes every subscription when it does).
//   - A fetch whose reply was lost (a cancelled ctx, a dead connection)
//     may have committed, or may still run at the server and commit
//     later. Each fetch tags the rows and the lease it writes with a
//     random lease_by;
//     after a failed fetch whose connection the client closed, the next
//     Receive ends that connection's server process, in whatever state
//     (pg_terminate_backend, the role's own; an idle one may not have
//     read the fetch yet, and would commit it once it does; a process of
//     that number started after the client closed the connection is
//     another's and is left alone) and waits until it is gone (at most
//     one lease), then first hands out the
//     rows still leased under that tag and what is pending in its lease
//     (restarted), with their attempt unchanged, before anything newer.
//     When the subscription closes instead (a Close cuts the fetch
//     short), Close runs the same wait and gives the deliveries back
//     uncounted and due at once (a first delivery, of the lease or not,
//     as a waiting row, not pending) before it returns (at most one ack
//     timeout plus 2s, then in the background): the bus closes the subscription before it
//     releases the group lock, so the member that takes the group or
//     the partition over fetches them first, in log order, and does not
//     wait an ack timeout for them.
//   - Ack is one statement per flush: it takes the seqs out of the
//     pending seqs of the leases the ids name (deleting a lease left
//     with none) and deletes the group's delivery rows of them (DELETE
//     ... seq BETWEEN the least and greatest of the ids AND seq =
//     ANY($ids), so that the index search is a range of the key). A
//     stale Ack still settles.
//   - Nack, Release and Snooze set visible_at = now + delay and leased =
//     false (Release and Snooze also take one off attempt: not counted);
//     Extend sets visible_at = now + ack timeout. Each acts only while
//     the row is still this delivery (n), leased and within its lease;
//     otherwise it changes nothing and returns backend.ErrStale. A first
//     delivery still pending in its lease (which has not run out) is
//     taken out of it, in the same statement, into a delivery row with
//     what the settlement sets (n = 1), so the rest of the lease is
//     untouched. The
//     subscriptions of the process are woken to re-read the next due time,
//     and a delay shorter than Options.Block is notified on the topic
//     after the commit, so members in every process re-read it: a delay
//     ends on time to a few milliseconds. (A longer one is read by the
//     next poll, which comes before it ends.)
//   - Scheduling: a message whose DeliverAt is ahead gets, when a group's
//     cursor passes it, a waiting delivery row due at its DeliverAt; a
//     publish notifies for it too, so an idle group passes it at once and
//     wakes when it is due. A fetch passes messages until it has found
//     as many due ones as it has room for; when it found only messages
//     not due, the next fetch follows at once and may pass up to 1024
//     more: delayed messages never hold back those after them.
//   - Leases are per delivery: a member's ack timeout applies to what it
//     fetched, and a member never changes another's lease, so members
//     with different ack timeouts can share a group.
//   - DeadLetter deletes the delivery row (or takes the seq out of its
//     lease) and writes the copy to the dead-letter topic in one
//     transaction: a stale id writes nothing.
//   - A message deleted while a group held it (Inspector.Delete,
//     DeleteTopic) is settled and reported with observer.ScopeReclaim; a
//     row whose headers do not decode is dead-lettered (or acked without
//     a dead-letter topic) and reported with observer.ScopeDecode.
//   - Subscription.Close does no I/O but the give-back of a fetch it cut
//     short (above): what it holds comes back after its lease. The bus
//     releases the deliveries whose handlers a shutdown cancelled first
//     (Release), so they come back at once, uncounted.
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
// RetainSettled (the default) deletes, every Options.TrimInterval (1s by
// default), the messages of each topic the Backend subscribes or
// published to (so a process that only publishes trims too) that every
// group's cursor has passed
// and that no group holds (a delivery row, or pending in a lease), in one
// statement (a cursor moves only together with the delivery rows and the
// lease of what it passes, and a message moves between a lease and a
// delivery row in one statement, so one snapshot never sees a passed
// message without what holds it), and only on
// topics with groups: a message some group has not settled is never
// deleted, and a topic nobody consumes (a dead-letter topic) keeps
// everything. TrimSettled (backend.SettledTrimmer) runs the same delete
// for one topic: the bus calls it when a subscription closes, after its
// settlements are flushed, so a consumer that settled everything and
// exits leaves nothing behind.
// RetainAll never deletes. BoundRetention (the bus's lifecycle events
// topic) caps one topic by age and length whatever its groups settled.
//
// # Key order and partitions
//
// backend.GroupLocker is a row of bus_locks taken or renewed by one
// INSERT ... ON CONFLICT DO UPDATE WHERE the holder is the caller or the
// lock ran out (the server's clock); backend.Partitioner keeps the count
// in bus_topics (set once, by the first caller) and the live members in
// bus_members. A key's messages from one publisher reach a group in
// publish order: a Publish that starts after another returned has a
// larger transaction id and seq. PublishTx takes a transaction lock on
// each key's hash and then raises its messages' ord to the last ord the
// key got (bus_keyord, which it updates), so a group reads a key's
// messages in the order their transactions committed, whatever order
// their transaction ids were assigned in. Under REPEATABLE READ or
// SERIALIZABLE a key record written after the transaction's snapshot
// fails PublishTx with a serialization error (retry the transaction)
// rather than being missed.
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
// backend.Extender, Releaser, Snoozer, DeadLetterer and PendingLister
// (the delivery rows handed out at least once and the seqs pending in
// leases, with their messages' IDs and keys, in log order, in one
// statement: a key-ordered member that takes over from a crashed one
// holds back only those keys); the Backend
// implements Inspector (Consumers counts the group's subscriptions whose
// bus_members row is live: one that closed stops counting at once, one
// whose process died within 15 s; Pending counts delivery rows with n >
// 0 and the seqs pending in leases; OldestPending is unknown: a delivery
// row or a lease keeps when its lease ends, not when it began),
// TopicDeleter, GroupSeeker (in-flight deliveries and leases of a sought
// group are dropped; a
// seek to a time writes a waiting delivery row per retained message from
// that time on and starts the cursor after the newest),
// GroupLocker and Partitioner.
package postgres

// Package inbox gives a handler exactly-once database effects on
// PostgreSQL, on every backend: it runs the handler inside a transaction
// that also records the message as processed, so a message delivered
// again after that transaction committed is acked without running the
// handler, and a transaction that rolled back leaves the message to be
// retried.
//
//	in, err := inbox.New(pool)
//	h := in.Handle(func(ctx context.Context, tx pgx.Tx, d *bus.Delivery) error {
//		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 10 WHERE id = $1", d.Key)
//		return err
//	})
//	sub, err := b.Subscribe(ctx, "payments", h, bus.WithGroup("ledger"))
//
// # Why
//
// The bus delivers at least once: a consumer that commits its work and
// dies (or loses its connection) before the ack gets the message again.
// The inbox makes the commit and the record of the message one atomic
// step, so the redelivery finds the record. It covers the effects the
// handler makes in the transaction it is given; anything else the
// handler does (an HTTP call, a publish outside the transaction) is still
// at least once. To publish from the handler exactly once, write to the
// outbox in the same transaction (package outbox).
//
// # How
//
// [Inbox.Handle] begins a transaction, inserts (topic, group, message ID)
// into bus_inbox with ON CONFLICT DO NOTHING, and:
//
//   - when the insert affected no row, the message was processed by an
//     earlier delivery whose transaction committed: it rolls back and
//     returns nil, and the bus acks;
//   - otherwise it runs the handler with the transaction; an error or a
//     panic rolls back and is returned (or re-panics) unchanged, so the
//     bus retries or dead-letters as usual; nil commits and returns nil,
//     and the bus acks.
//
// The group is the Delivery's Group (bus.WithGroup; "default" when
// none is given), so each group of a topic handles a message once; the
// topic is the Delivery's Topic (on a partitioned topic, the topic's
// name, not the partition's), and the ID the Message's ID, which the
// publisher fixes (bus.Publish assigns one when it is empty; the outbox
// fixes it at commit).
//
// Two deliveries of one message can race, for example a redelivery after
// a lease ran out while the first delivery still runs. The insert comes
// first in the transaction: at ReadCommitted the second insert waits on
// the first's uncommitted row; if the first commits, the second finds the
// row and is acked without running; if it rolls back, the second runs.
// At RepeatableRead and Serializable ([WithIsolation]) the second fails
// with a serialization error and the bus retries it. A handler that runs
// long holds its row (and a connection) for as long; so does the racing
// duplicate.
//
// # Ack modes
//
// The handler Handle returns settles nothing itself. In AckOnSuccess (the
// default) the bus acks when it returns nil. In AckManual, ack when it
// returns nil. AckOnReceive acks before the handler runs, so a failed
// transaction is not retried: use AckOnSuccess.
//
// # Schema
//
// [Migrate] creates, idempotently, in the connection's current schema,
// the table bus_inbox (topic, group_name, id: its primary key; and
// processed_at, the start of the transaction that recorded it) and an
// index on processed_at. [Schema] returns the SQL for those who apply
// migrations with their own tool.
//
// # Pruning
//
// The table grows by one row per message and group. [Inbox.Prune]
// deletes the rows older than a retention, oldest first, in statements of
// at most [WithPruneBatch] rows (each its own transaction), so it never
// holds many locks or writes much at once; run it periodically (a ticker,
// a cron job). Several may run at once.
//
// The retention must exceed the longest time a message can still be
// delivered to the group after its transaction committed; a message
// delivered after its row was pruned is handled again. That time is the
// sum of:
//
//   - the lease (bus.WithAckTimeout), after which a dead consumer's
//     messages come back;
//   - how long the group may have no live consumer: a message a consumer
//     took before it died comes back when a consumer returns;
//   - a republish of the same ID: the outbox relay's restart after a
//     crash, or a producer that retries a publish after the broker's
//     dedup window.
//
// Days, not minutes: the row is small, and Prune refuses a retention
// under a minute.
//
// # database/sql
//
// [NewSQL] takes a *sql.DB of any PostgreSQL driver and gives handlers a
// *sql.Tx; [SQL] adapts a database/sql handle for Migrate.
//
// # Concurrency
//
// An Inbox is safe for concurrent use; the handlers Handle returns may
// run concurrently, each in a transaction of its own.
package inbox

// Package outbox is the transactional outbox on PostgreSQL: an event is
// written in the same transaction as the data it speaks of, and a relay
// publishes it to the bus once that transaction has committed. The dual
// write (the row commits and the event is lost, or the event goes out and
// the transaction rolls back) cannot happen.
//
//	tx, _ := pool.Begin(ctx)
//	// ... the application's writes ...
//	err := outbox.Publish(ctx, tx, "orders.created", &bus.Message{Key: orderID, Payload: body})
//	err = tx.Commit(ctx)
//
// # Writing
//
// [Publish] takes the caller's transaction: a pgx.Tx (or anything with
// pgx's Exec, such as *pgx.Conn and *pgxpool.Pool), or a database/sql
// transaction through [SQL], whatever its driver. It validates the topic
// and the messages exactly as bus.Publish does, before any I/O, with the
// same errors, and assigns the same time-ordered IDs (UUIDv7) to messages
// without one; the ID is fixed at commit, and the bus's idempotent publish
// deduplicates on it. A rolled-back transaction leaves nothing behind.
//
// # Schema
//
// [Migrate] (or `bus outbox migrate --db URL`) creates, idempotently, in
// the connection's current schema:
//
//   - bus_outbox: seq (identity, the order of writing), part (the relay
//     partition), topic, id, key and headers (bytea: valid UTF-8 may hold
//     NUL, which text refuses; headers as a JSON object), payload,
//     deliver_at, expires_at, created_at. Its primary key on seq is the
//     index the relay reads by.
//   - bus_outbox_dead: the same columns plus failed_at and reason, indexed
//     by failed_at, for rows that can never be published.
//   - a statement trigger that runs pg_notify('bus_outbox') on insert, so
//     relays wake when a writing transaction commits.
//
// bus_outbox's storage parameters make autovacuum run after a fixed 5,000
// dead rows: every row is deleted soon after it is written.
//
// [Schema] returns the SQL for those who apply migrations with their own
// tool.
//
// # Relaying
//
// A [Relay] (in the application, or `bus outbox relay --db URL --url
// BUSURL`) reads the oldest rows of its partitions in seq order, a batch
// at a time, publishes them (one Publish per topic in the batch, rows in
// order), and deletes them only after Publish returned nil: delivery is
// at least once, and a row published again after a crash is stored once
// by the bus's idempotent publish, whose window must cover the relay's
// restart. It wakes on LISTEN/NOTIFY and polls every poll interval as a
// fallback (a notification lost with a dropped connection costs at most
// that). A failed publish leaves the rows in place and is retried with a
// back-off; the database connection is re-established the same way.
//
// # Order and several relays
//
// A message's partition is the hash of its key modulo [Partitions]; one
// relay at a time holds a partition, through a session-level advisory lock
// taken on the connection that does all of that relay's reads and deletes.
// When the connection drops (a relay crash, a database restart), the lock
// goes with it, and the relay can no longer delete what it read. The
// relays count one another (a shared advisory lock) and each takes
// ceil(Partitions / relays) partitions, giving back extras between
// batches, so that running more relays spreads the work and a relay that
// stops is replaced within the poll interval.
//
// Advisory locks rather than SELECT ... FOR UPDATE SKIP LOCKED: SKIP
// LOCKED lets a second relay take a key's next row while the first still
// publishes the previous one, so the key's order would depend on which
// relay's Publish finishes first. Keeping order with it would need a
// per-key claim table; a partition lock keeps it with no extra writes.
//
// Order per key is the order of commit: Publish takes a transaction lock
// on each key's hash (in one fixed order within a call) before drawing
// seq, so a second transaction writing the same key waits for the first
// to commit or roll back, and gets the later seq. The relay publishes a
// partition in seq order, so a key's messages reach the bus in commit
// order. Call Publish once per transaction, near its end, so that the key
// locks are held briefly and do not deadlock with the application's locks.
//
// # Dead rows
//
// A row that can never be published (the bus refuses its topic or its
// message before any I/O, or its headers do not decode) moves, in the same
// statement that deletes the published rows, to bus_outbox_dead with the
// reason, reported to the observer (scope dead_letter, code rejected);
// the rows after it go on. `bus topics --db URL` and the dashboard list
// them; [Dead] and [Stats] read them from Go.
//
// # Metrics and errors
//
// The relay records, through OpenTelemetry ([WithMeterProvider]):
// [PublishedMetric] (a counter; its rate is rows published per second),
// [DeadMetric], [PendingMetric] (rows waiting) and [LagMetric] (the age
// of the oldest waiting row). The gauges are measured about once per poll
// interval and are not reported before the first measurement. Errors go
// to the observer ([WithObserver]; by default slog.Default()): the
// connection (scope connection) and publishing (scope publish) report the
// first error of an outage and its recovery, not every retry.
//
// # Shutdown
//
// [Relay.Close] stops the relay and returns when it has stopped or when
// its ctx ends. A publish it abandons leaves its rows in the table.
package outbox

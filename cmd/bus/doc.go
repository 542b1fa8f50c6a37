// Command bus is the command-line tool of the bus library: it measures a
// backend, publishes messages and prints deliveries.
//
// Every command takes --url, the backend URL; it defaults to $BUS_URL, and
// to mem:// (the in-process backend) when that is unset. Flags may come
// before or after positional arguments; "--" ends them.
//
// # Module
//
// The command is a module of its own (github.com/eventbus-go/bus/cmd/bus),
// so that what only it needs (the browser driver of the dashboard's test)
// stays out of the library's go.mod. Install it with
//
//	go install github.com/eventbus-go/bus/cmd/bus@latest
//
// In a checkout, go.work joins it to the library next to it; a release tags
// the library first and then sets this module's requirement to that tag.
//
// # bus bench
//
// bus bench measures one scenario and checks that every message arrived
// exactly once:
//
//   - publish: n messages from --publishers goroutines in batches of
//     --batch; latency is that of each Publish call.
//   - consume: n messages are published first (not timed), then a new group
//     consumes and acks them: created before the prefill, starting from
//     the oldest message where the backend can.
//   - e2e (the default): subscribe, then publish and consume at once;
//     latency runs from the Publish call to the handler.
//   - outbox: e2e through the transactional outbox in the PostgreSQL
//     database --db: each batch is one outbox.Publish committed as a
//     transaction of its own, and a relay in the process publishes the
//     rows to the bus; latency runs from the outbox.Publish call to the
//     handler. Its --baseline (redis:// only) is the dual write the
//     outbox replaces: an INSERT of the batch, then its XADDs.
//   - backlog: drains a prefilled backlog (-n, default 200,000) with a
//     handler that sleeps --handler-delay (default 1ms, standing for
//     I/O), once with bus.WithAutoscale(1, --autoscale-max) (default 64)
//     and once per fixed max in flight of the sweep --autoscale-max, half
//     of it, ... 1, each as a consume run of its own; it prints each drain
//     time, the best fixed bound, autoscale's time over the best's (target
//     at most 1.5) and max in flight 1's over autoscale's (target at least
//     5). With --json it prints one line with the keys backend, scenario,
//     n, handler_delay_ms, runs (label, max_in_flight or autoscale_max,
//     seconds, msgs_per_sec, lost, errors), best_fixed,
//     autoscale_over_best, one_over_autoscale and targets_met.
//
// Each payload (--size bytes, at least 16) starts with a sequence number
// tagged with a per-run nonce and a timestamp. The handler marks the
// sequence number in a bitmap, so deliveries, duplicates and lost messages
// are exact; messages on the topic that another run published are counted
// as foreign and ignored. Latency goes into a lock-free log-linear
// histogram (about 3% resolution) and is reported as p50, p99, p999 and
// max. The peak live heap is sampled with runtime/metrics from a collected
// heap (for consume, during the consume phase).
//
// --rate R paces the publishers: batch g is due g×batch/R seconds after
// the start, batches go round-robin to the publishers, and payloads carry
// the scheduled time, so latency counts from when a message should have
// been sent (no coordinated omission). The achieved rate is reported, and
// whether it fell below 95% of the target.
//
// --report-every D prints, during an e2e run, a line per interval D: the
// messages delivered in it, their rate and their p50, p99 and max
// latency; on postgres:// the run ends with each bus table's size, live
// and dead rows and vacuum count.
//
// --baseline also runs the raw client with the same settings (a buffered
// Go channel for mem://, go-redis for redis:// and rediss://, nats.go
// JetStream or core for nats://, franz-go for kafka://: an idempotent
// producer and one group member committing once per poll) on a stream
// of its own, and prints both
// results with the bus/raw ratios of throughput and latency. --rounds K
// alternates which side runs first over K rounds and reports medians.
//
// The summary is a table on stdout; with --json it is exactly one JSON line
// with the keys backend, scenario, n, size, seconds, msgs_per_sec, p50_ms,
// p99_ms, p999_ms, latency (null when none was measured, as in consume),
// delivered, duplicates, lost, late (not arrived by the end but still
// held by the broker for the run's group), ack_mode, batch, publishers, max_in_flight,
// rate, achieved_rate, rate_short, gogc, peak_heap_mib and cpu_us_per_msg
// (the user and system CPU time of the whole process during the scenario,
// per message, in microseconds; null when unknown); with --baseline
// also rounds, baseline (the raw figures) and ratio. The heap figure is
// repeated on stderr. When stderr is a terminal a progress line is updated
// five times a second. The command exits with status 1 when a message was
// lost or the run timed out (--timeout, default 30s plus 100µs per
// message), and 2 on a bad command line, before any I/O. --cpuprofile
// writes a CPU profile of the run. The run keeps the runtime's GOGC ($GOGC,
// else 100); --gogc N sets another for the run.
//
// On a persistent backend a run leaves its topic behind (default names
// start with "bus-bench."). The consume scenario holds the whole prefill in
// the backend: on a private mem:// without backlog parameters bench raises
// the limits to fit -n; for a named broker set them in the URL, e.g.
// mem://name?max_backlog=1000000&max_backlog_bytes=1073741824.
//
//	go run ./cmd/bus bench --scenario e2e -n 1000000 --size 256 --json
//	bus bench --url redis://127.0.0.1:6379 --scenario consume -n 200000
//	bus bench --url nats://127.0.0.1:4222 --rate 5000 --baseline --rounds 3
//	bus bench --url redis://127.0.0.1:6379 --scenario backlog
//
// # bus publish
//
// bus publish --topic T [--key K] [--header k=v ...] [payload ...]
// publishes each payload argument as one message, or each line of stdin
// when there is none, and prints each message ID.
//
// # bus tail
//
// bus tail --topic T [--group G] [--from oldest|newest] [--ack-mode M]
// prints each delivery (ID, attempt, publish time, key, headers and
// payload, with non-printable bytes escaped) until interrupted or until
// --count deliveries were printed, then closes the subscription
// gracefully: handlers finish and acks are flushed. Deliveries are acked
// for the group, so use a group of its own to watch a topic without taking
// messages from its consumers.
//
// # bus outbox
//
// bus outbox migrate --db URL creates the transactional outbox's tables in
// PostgreSQL (idempotent); bus outbox relay --db URL --url BUSURL
// publishes the committed outbox rows to the bus until interrupted
// (several may run: they share the partitions). bus topics --db URL and
// bus ui --db URL add the outbox's pending and dead rows; bus outbox
// requeue --db URL (--seq N[,N...] | --all) moves dead rows back to the
// outbox once what made them fail is fixed. --db defaults
// to $BUS_OUTBOX_DB for the outbox commands. See docs/outbox.md.
package main

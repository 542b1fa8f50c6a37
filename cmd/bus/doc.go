// Command bus is the command-line tool of the bus library: it measures a
// backend, publishes messages and prints deliveries.
//
// Every command takes --url, the backend URL; it defaults to $BUS_URL, and
// to mem:// (the in-process backend) when that is unset. Flags come before
// positional arguments.
//
// # bus bench
//
// bus bench measures one scenario and checks that every message arrived
// exactly once:
//
//   - publish: n messages from --publishers goroutines in batches of
//     --batch; latency is that of each Publish call.
//   - consume: n messages are published first (not timed), then a new group
//     starting from the oldest message consumes and acks them.
//   - e2e (the default): subscribe, then publish and consume at once;
//     latency runs from the Publish call to the handler.
//
// Each payload (--size bytes, at least 16) starts with a sequence number
// tagged with a per-run nonce and the publish time. The handler marks the
// sequence number in a bitmap, so deliveries, duplicates and lost messages
// are exact; messages on the topic that another run published are counted
// as foreign and ignored. Latency goes into a lock-free log-linear
// histogram (about 3% resolution). The peak live heap is sampled with
// runtime/metrics during the run.
//
// The summary is a table on stdout; with --json it is exactly one JSON line
// with the keys backend, scenario, n, size, seconds, msgs_per_sec, p50_ms,
// p99_ms, delivered, duplicates and lost, and the heap figure goes to
// stderr. When stderr is a terminal a progress line is updated five times a
// second. The command exits with status 1 when a message was lost or the
// run timed out (--timeout, default 30s plus 100µs per message), and 2 on a
// bad command line. --cpuprofile writes a CPU profile of the run. --gogc
// (default 400, ignored when $GOGC is set) sets the garbage collector's
// target for the run, as a throughput-minded service would; it changes how
// often the collector runs, not the live heap.
//
// On a persistent backend a run leaves its topic behind (default names
// start with "bus-bench."). The consume scenario holds the whole prefill in
// the backend, so on mem:// raise its backlog limits for a large -n:
// mem://?max_backlog=1000000&max_backlog_bytes=1073741824.
//
//	go run ./cmd/bus bench --scenario e2e -n 1000000 --size 256 --json
//	bus bench --url redis://127.0.0.1:6379 --scenario consume -n 200000
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
package main

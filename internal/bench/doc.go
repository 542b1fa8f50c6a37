// Package bench holds the benchmarks that compare the bus with its peers
// in one run, so every ratio is measured on the same machine at the same
// moment. It has no API; everything lives in _test.go files.
//
// # Benchmarks
//
//   - BenchmarkMemE2EVsChannel: a plain buffered Go channel pipeline
//     (producer goroutine, buffered channel, consumer goroutine) against
//     the bus on mem:// end to end with AckOnSuccess, 256-byte payloads;
//     it reports both rates, the bus/channel ratio and the CPU time per
//     message of each side. BenchmarkChannelPipeline and BenchmarkMemE2E
//     run one side alone, for profiling; BenchmarkMemPublish and
//     BenchmarkMemConsume split the bus side into its publishing and its
//     consuming half.
//   - BenchmarkPortableLayerDispatchAndAck and
//     BenchmarkPublishPortableLayer: the portable layer alone, over
//     backends that do no I/O, with allocations per message (see
//     portable_test.go).
//   - BenchmarkTypedPublish and BenchmarkTypedConsume: a typed topic
//     (bus.Topic, the JSON codec) beside the untyped path with the payload
//     already encoded and with encoding/json called by hand, over backends
//     that do no I/O, with allocations per message (see typed_test.go).
//
// Run them with
//
//	go test ./internal/bench -run '^$' -bench . -benchtime 5x
//
// Each benchmark reports msgs/s figures with b.ReportMetric; ns/op counts
// a whole round of messages and is not a per-message cost.
//
// # Where the other benchmark code lives
//
//   - here: the bus on mem:// against a Go channel, the portable layer
//     and the typed layer;
//   - internal/bench/brokers: the bus on Redis, NATS and PostgreSQL
//     (the outbox) against their raw clients, and the lateness of delayed
//     redeliveries; apart from here so that the test binary of this
//     package links no broker client nor test server, whose globals every
//     garbage collection cycle of the mem:// benchmarks would otherwise
//     mark;
//   - contrib/watermill (bench_test.go, consume_bench_test.go,
//     peers_bench_test.go): the benchmarks of Watermill's Pub/Subs beside
//     the adapter, the bus and the raw clients (BenchmarkPeers), in the
//     one module that may depend on Watermill;
//   - internal/rawclient: the raw clients (go-redis, nats.go, pgx, and in
//     internal/rawclient/gochan a Go channel) that this package,
//     internal/bench/brokers and the bus command measure the bus against;
//   - conformance (bench.go): RunBenchmarks, the portable benchmarks a
//     backend's package runs against itself through the bus;
//   - cmd/bus (bench*.go): the bus bench command, which measures a
//     running deployment from the command line;
//   - a backend's package: its RunBenchmarks call and benchmarks of its
//     internals that need unexported access (redisstream's delayed heap).
package bench

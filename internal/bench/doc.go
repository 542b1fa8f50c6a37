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
//   - BenchmarkRedis*: the bus on Redis Streams against raw go-redis doing
//     the same work (see redis_test.go).
//   - BenchmarkNATS*: the bus on NATS JetStream against raw nats.go doing
//     the same work (see nats_test.go).
//   - BenchmarkOutboxE2E: the transactional outbox (outbox.Publish, a
//     relay, the bus on Redis) against the dual write it replaces (an
//     INSERT, then XADDs), on a private PostgreSQL (see outbox_test.go).
//
// Run them with
//
//	go test ./internal/bench -run '^$' -bench . -benchtime 5x
//
// Each benchmark reports msgs/s figures with b.ReportMetric; ns/op counts
// a whole round of messages and is not a per-message cost.
package bench

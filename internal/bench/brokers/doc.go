// Package brokers holds the benchmarks that compare the bus on a broker
// with that broker's raw client in one run, so every ratio is measured on
// the same machine, server and moment. It has no API; everything lives in
// _test.go files.
//
// # Benchmarks
//
//   - BenchmarkRedis*: the bus on Redis Streams against raw go-redis doing
//     the same work (see redis_test.go).
//   - BenchmarkNATS*: the bus on NATS JetStream against raw nats.go doing
//     the same work (see nats_test.go).
//   - BenchmarkOutboxE2E: the transactional outbox (outbox.Publish, a
//     relay, the bus on Redis) against the dual write it replaces (an
//     INSERT, then XADDs), on a private PostgreSQL (see outbox_test.go).
//   - BenchmarkDelayLateness: how late a delayed redelivery comes on mem,
//     Redis and NATS, under load (see delay_test.go).
//
// Run them with
//
//	go test ./internal/bench/brokers -run '^$' -bench . -benchtime 5x
//
// The servers are private ones the benchmarks start, or those of
// $BUS_REDIS_URL and $BUS_NATS_URL.
//
// They live apart from internal/bench, whose mem:// benchmarks count
// instructions per message: a test binary that links the broker clients
// and their test servers carries their globals, which every cycle of the
// garbage collector marks.
package brokers

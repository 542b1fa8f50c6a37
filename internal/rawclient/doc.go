// Package rawclient holds the raw-client loops the bus is measured
// against: a buffered Go channel for mem:// (in gochan, so that a
// benchmark of mem:// links no broker client), go-redis for Redis Streams,
// nats.go for JetStream, pgx for PostgreSQL, amqp091-go for RabbitMQ and
// franz-go for Kafka, and for the transactional outbox the dual write it
// replaces (a pgx INSERT, then go-redis XADDs). They live once, here:
// `bus bench --baseline` (cmd/bus), the Go benchmarks (internal/bench and
// internal/bench/brokers) and the Watermill peer benchmark
// (contrib/watermill's BenchmarkPeers) drive them, so a ratio printed by
// one is a ratio of the others. Loop runs a consumer's loop on a goroutine
// of its own for any of them.
//
// Each loop does what the bus does for the same guarantee and no more: a
// Redis publish is one pipeline of XADDs per batch, each entry carrying a
// unique ID as the bus's do; a JetStream publish waits for the acks of its
// batch; a consumer acknowledges what it handled, once per read.
package rawclient

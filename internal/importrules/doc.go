// Package importrules holds a test that keeps heavy dependencies where they
// belong: the SPI and the observer core build with the standard library
// alone, OpenTelemetry stays in otelbus and the opt-in tracing conformance
// package, go-redis stays in redisstream and the Redis dedup store, and
// nats.go stays in the nats backend. It has no code of its own.
package importrules

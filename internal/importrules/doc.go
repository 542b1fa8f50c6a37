// Package importrules holds a test that keeps heavy dependencies where they
// belong: the SPI and the observer core build with the standard library
// alone, OpenTelemetry stays in otelbus and the opt-in tracing conformance
// package, go-redis stays in redisstream and the Redis dedup store, and
// nats.go stays in the nats backend. Its tests also keep package backend
// for backend authors (no other package, example or doc imports it) and
// the backends' use of the root package to Register. It has no code of
// its own.
package importrules

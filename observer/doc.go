// Package observer receives the errors of a bus that have no caller to
// return to: receive and ack failures, handler errors and panics, lease
// reclaims, dead-lettering, decode failures and shutdown problems; and
// notices with a nil Err: the recovery that ends an outage (Recovery),
// and the decisions of an autoscaled subscription (ScopeScale, Scale).
// Observers that count errors skip the notices.
//
// Each error is handled once: the bus either returns it to a caller or
// reports it here, never both.
//
// # Implementations
//
//   - Func adapts a function.
//   - Multi fans an event out to several observers.
//   - Slog logs events through a *slog.Logger (never payloads).
//   - otelbus.Observer (package github.com/eventbus-go/bus/middleware/otelbus)
//     counts events in an OpenTelemetry counter (bus.errors) by scope,
//     topic and group, and records the bound of each scaling decision in
//     a gauge (bus.consumer.in_flight_bound). It lives there so that this package, and the
//     backend SPI that uses it, import only the standard library.
//   - Nop discards events. A bus without an observer uses Slog over
//     slog.Default(), so that failures are never silent by default.
//
// Observers are called from the bus's goroutines and must be safe for
// concurrent use. They should return quickly.
package observer

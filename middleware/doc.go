// Package middleware holds handler and publish middleware for package bus.
//
// Handler middleware has the shape bus.Middleware, func(bus.Handler)
// bus.Handler, and is installed with bus.WithMiddleware on a Bus (every
// subscription) or on one Subscribe call. Publish middleware has the shape
// bus.PublishMiddleware and is installed with bus.WithPublishMiddleware.
// Middleware listed first runs outermost.
//
// # Handler middleware
//
//   - Retry calls a failing handler again in process, with a backoff
//     policy, before the error reaches the bus (which then nacks).
//   - Timeout gives each handler call a fresh deadline; placed inside
//     Retry, every retry gets its own deadline.
//   - Dedup skips messages whose ID was already handled, with a pluggable
//     Store (MemoryStore here; a Redis store in middleware/redisdedup).
//   - Breaker (CircuitBreaker) stops calling a failing dependency and
//     nacks with a delay while it is open.
//   - CorrelationID puts the correlation ID of the consumed message into
//     the handler ctx.
//   - Logging logs each handled delivery through a *slog.Logger, never
//     payloads, with header values redacted by default.
//
// # Publish middleware
//
//   - CorrelationIDPublish copies the correlation ID of the ctx into the
//     headers of published messages, so it flows from a consumed message
//     to the messages published while handling it.
//
// Publish middleware never changes the caller's messages: a message that
// needs a header is copied first.
//
// # Ordering
//
// A typical stack is
//
//	bus.WithMiddleware(
//		middleware.Logging(logger),
//		middleware.CorrelationID(),
//		middleware.Dedup(store),
//		breaker.Middleware(),
//		middleware.Retry(3, nil),
//		middleware.Timeout(5*time.Second),
//	)
//
// Retry outside Timeout gives each retry a fresh deadline. Dedup outside
// Retry marks a message handled only once all retries are done.
//
// # Tracing and metrics
//
// OpenTelemetry tracing and metrics live in the subpackage otelbus, so that
// this package does not depend on OpenTelemetry.
//
// # Concurrency
//
// Every middleware returned by this package is safe for concurrent use by
// many subscriptions.
package middleware

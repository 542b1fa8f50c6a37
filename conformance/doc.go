// Package conformance is the test suite every bus backend runs. It proves
// that a backend, driven through the portable bus API, gives the
// semantics the bus documents: delivery, consumer groups, the three ack
// modes, redelivery, dead-lettering, backpressure, shutdown and
// validation.
//
// # Running the suite
//
// A backend's conformance_test.go hands Run a constructor that returns a
// fresh backend per case:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t testing.TB) backend.Backend {
//			be, err := mybackend.New(nil)
//			require.NoError(t, err)
//			return be
//		})
//	}
//
//	func BenchmarkConformance(b *testing.B) {
//		conformance.RunBenchmarks(b, newBackend)
//	}
//
// The suite closes each backend through bus.Close when the case ends. The
// constructor may share a broker connection pool or server between cases:
// every case works on its own topics and groups, named uniquely per run,
// so a shared, persistent broker needs no cleanup between runs.
//
// # Cases
//
// Each case is a subtest named after the behaviour it checks
// (RoundTrip, ConsumerGroupSharesLoad, NackDelayRespected,
// CloseDrainsAndFlushesAcks, NoGoroutineLeak, ...; see the case table in
// conformance.go). Cases use only the public API: bus.New over the
// backend, Publish, Subscribe with options, and Delivery settlement. A
// recording observer checks what reaches observer.Observer, and a counting
// wrapper around the backend proves that invalid input is rejected
// before any backend call.
//
// Optional interfaces choose cases too: a backend whose subscriptions
// implement backend.Releaser runs ShutdownsDoNotBurnAttempts (three
// shutdowns during one slow handler, then a clean ack at Attempt 1), one
// that implements backend.GroupSeeker runs SeekGroup, and
// backend.TopicDeleter runs DeleteTopic. The shutdown cases check that
// Close returns by its ctx on every path: after the Subscribe ctx ended
// (CloseAfterSubscribeCtxEnded), concurrently (ConcurrentClosesBounded)
// and after the backend failed for good (CloseAfterBackendFailure).
//
// Cases run one after another, never in parallel: the goroutine-leak case
// needs a quiet process, and timing cases need the CPU.
//
// # Capabilities
//
// Cases are chosen by the backend's Capabilities. A case that needs a
// capability the backend lacks is skipped with a reason naming it: for
// example an at-most-once backend (no Redelivery) skips the nack, lease
// and max_deliveries cases, and one without StartOldest skips
// StartFromOldest. Parts of a case that depend on a capability (the retry
// after a panic, the quiet window after an ack) run only where it holds.
// WithSkip skips named cases for behaviour Capabilities cannot express;
// prefer fixing the backend or its Capabilities.
//
// # Timing
//
// The suite is fast because leases are short: 500ms for the redelivery
// cases, 1s for the manual-ack case, 20s where a case counts exactly. Every
// positive wait is a condition polled until a 10s deadline; "not
// redelivered" is checked over a bounded quiet window (usually twice the
// short lease) after a positive condition. WithTimeScale stretches every
// lease, delay and deadline for brokers with a coarse lease clock.
// -short shrinks the message counts (5,000 messages from 50 publishers
// become 200 from 10).
//
// # Goroutine leaks
//
// The NoGoroutineLeak case snapshots the goroutines after the backend is
// constructed and before the bus exists, runs subscriptions in every ack
// mode, closes the bus and checks with goleak that nothing started since
// is still running. A backend whose broker runs inside the test process
// (an embedded server starts goroutines per stream) may skip it with
// WithSkip and check its own goroutines instead.
//
// # Benchmarks
//
// RunBenchmarks reports msgs/s for three scenarios: Publish (batches of
// 16 messages of 256 bytes), Consume (a group drains a 2,000-message
// backlog published while it had no member; the prefill is not timed) and
// E2E (publish and consume at once, with at most 8,192 messages in
// flight, timed until the last one is handled).
package conformance

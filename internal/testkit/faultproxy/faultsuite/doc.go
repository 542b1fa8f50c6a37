// Package faultsuite runs network-fault cases against a backend through
// [faultproxy] proxies in front of a private server.
//
// # Use
//
// A backend's test calls [Run] with a [Harness]: the address of a private
// server started by the test, and a function that opens a backend whose
// connections all go to a given address. Every case builds its own
// proxies and buses through the portable API (bus.New), so publisher and
// consumer sides fail independently.
//
// # Cases
//
//   - ResetPublisherSide and ResetConsumerSide: every live connection of
//     one side is reset (TCP RST) several times while messages flow.
//   - BlackholeLongerThanAckTimeout: a consumer holding deliveries is
//     blackholed for three ack timeouts; another member takes over, and the
//     first recovers when the link heals.
//   - BlackholeBoundsEveryCall: over a blackholed link, Publish with a
//     200 ms ctx fails within 300 ms, Subscribe with a 500 ms ctx returns
//     within 600 ms, and Subscription.Close and Bus.Close with a 1 s ctx
//     return within 1.1 s.
//   - Latency50ms: 50 ms added in each direction on both sides.
//   - Partition1500msDuringBatch: both sides are partitioned for 1.5 s
//     while 2,000 messages are published in batches of 100.
//   - CloseMidRunFlushesFinished: a subscription closed while 16 handlers
//     run flushes their acks; the next member never sees a finished one.
//   - ServerRestartMidRun: the server stops and starts again (same address
//     and data) under a running publisher and consumer; skipped unless
//     the harness can do it.
//
// # Broker pause
//
// [RunPause] needs no proxy but a server the harness can freeze
// (Harness.PauseServer, SIGSTOP, and ResumeServer): a key-ordered group
// of one member, two members, and two members sharing four partitions
// consumes 3,000 messages of 64 keys while the server is frozen five
// times (400 ms, once 1.2 s). Each case asserts that no message is lost, handled
// out of its key's order, handled twice or counted as a redelivery, and
// that all are handled within 10 s of the last Publish under a 30 s ack
// timeout, so none waited for its lease. Harness.PauseCases runs some of
// the cases only, and Harness.PauseMessages publishes fewer messages. [RunPauseBounds] checks the calls of
// BlackholeBoundsEveryCall against their ctx while the server is frozen
// instead of blackholed.
//
// # Assertions
//
// Each case keeps a [Ledger] of the IDs whose Publish returned nil and
// the IDs handlers received, and asserts that none is lost, that the
// subscriptions recover by themselves once the fault heals (no restart,
// no new Subscribe), and that every timed call returns within its ctx plus
// [Grace]. Counts and waits are bounded, and each case runs under a
// watchdog that dumps every goroutine and fails if the case hangs.
package faultsuite

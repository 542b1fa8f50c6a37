package conformance

import (
	"testing"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// NewBackend returns a fresh backend for one case. The suite closes it
// (through bus.Close) when the case ends.
type NewBackend func(t testing.TB) backend.Backend

// Option tunes the suite for a backend, for example one whose broker needs
// longer leases than the in-process backend.
type Option func(*config)

// WithTimeScale multiplies every ack timeout, nack delay and wait deadline
// of the suite by f (f >= 1). Use it for backends whose brokers have a
// coarse lease clock; the default is 1.
func WithTimeScale(f float64) Option {
	return func(c *config) {
		if f >= 1 {
			c.scale = f
		}
	}
}

// WithSkip skips the named cases (the subtest names, e.g. "Ordering"),
// with the reason given, for behaviour a backend documents as different.
// Prefer Capabilities: skipping is for the rare case they cannot express.
func WithSkip(reason string, names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			c.skip[n] = reason
		}
	}
}

// WithCrashReturnsAtLapse tells the suite that the backend gives a
// crashed key-ordered member's deliveries back to the group when the
// member's group lock lapses, before their leases end (as a broker that
// returns a dead connection's deliveries at once does), and the next
// holder then lists nothing pending: KeyOrderCrashStallsOnlyItsKeys
// checks that the dead member's keys resume in order within the same
// bound as the other keys, rather than after the dead member's leases.
func WithCrashReturnsAtLapse() Option {
	return func(c *config) { c.crashReturnsAtLapse = true }
}

// WithOnly runs the named cases alone, for a backend's test that runs
// one area of the suite again in another setting (an older server, for
// example).
func WithOnly(names ...string) Option {
	return func(c *config) {
		if c.only == nil {
			c.only = map[string]bool{}
		}
		for _, n := range names {
			c.only[n] = true
		}
	}
}

type config struct {
	scale float64
	skip  map[string]string
	only  map[string]bool // nil: every case
	// crashReturnsAtLapse: see WithCrashReturnsAtLapse.
	crashReturnsAtLapse bool
}

// dur scales a base duration by the configured time scale.
func (c config) dur(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.scale)
}

// testCase is one entry of the suite. needs lists the capabilities the
// case requires; the case is skipped, with a reason naming them, when the
// backend lacks any.
type testCase struct {
	name  string
	needs []capability
	run   func(t *testing.T, s *suite)
}

// cases is the suite, in the order it runs.
var cases = []testCase{
	// The SPI itself, without the bus.
	{name: "SPI/ReceiveAtMostMax", run: testSPIReceiveAtMostMax},
	{name: "SPI/ReceiveHonoursCtx", run: testSPIReceiveHonoursCtx},
	{name: "SPI/ReceiveAfterCloseErrClosed", run: testSPIReceiveAfterClose},
	{name: "SPI/ReceiveInProgressAtCloseErrClosed", run: testSPIReceiveInProgressAtClose},
	{name: "SPI/AckSettlesIdempotently", needs: []capability{capRedelivery}, run: testSPIAckSettlesIdempotently},
	{name: "SPI/StaleRule", needs: []capability{capRedelivery}, run: testSPIStaleRule},
	{name: "SPI/AttemptCountsUp", needs: []capability{capRedelivery}, run: testSPIAttemptCountsUp},
	{name: "SPI/PublishCopiesBuffers", run: testSPIPublishCopiesBuffers},
	{name: "SPI/CapabilitiesAgree", run: testSPICapabilitiesAgree},

	// Delivery.
	{name: "RoundTrip", run: testRoundTrip},
	{name: "TopicIsolation", run: testTopicIsolation},
	{name: "ConcurrentPublishersNoLoss", run: testConcurrentPublishersNoLoss},
	{name: "PublishAsyncKeyOrder", run: testPublishAsyncKeyOrder},
	{name: "PublishAsyncFailurePausesKey", run: testPublishAsyncFailurePausesKey},
	{name: "ConsumerGroupSharesLoad", needs: []capability{capGroups}, run: testConsumerGroupSharesLoad},
	{name: "TwoGroupsEachGetEveryMessage", needs: []capability{capGroups}, run: testTwoGroupsEachGetEveryMessage},
	{name: "Ordering", needs: []capability{capOrdered}, run: testOrdering},
	{name: "StartFromNewest", run: testStartFromNewest},
	{name: "StartFromOldest", needs: []capability{capStartOldest, capGroups}, run: testStartFromOldest},

	// Ack modes and settlement.
	{name: "AckOnReceive", run: testAckOnReceive},
	{name: "AckOnSuccess", run: testAckOnSuccess},
	{name: "AckManual", run: testAckManual},
	{name: "SettleTwice", run: testSettleTwice},
	{name: "NackRedeliversWithIncrementedAttempt", needs: []capability{capRedelivery}, run: testNackRedelivers},
	{name: "NackDelayRespected", needs: []capability{capRedelivery, capNackDelay}, run: testNackDelay},
	{name: "UnackedRedeliveredAfterAckTimeout", needs: []capability{capRedelivery}, run: testAckTimeoutRedelivery},
	{name: "ExtendPreventsRedelivery", needs: []capability{capRedelivery, capExtend}, run: testExtend},
	{name: "HandlerTimeoutIsRetried", needs: []capability{capRedelivery}, run: testHandlerTimeout},

	// Leases.
	{name: "LongHandlerRunsOnceWithoutExtend", needs: []capability{capRedelivery, capExtend}, run: testLongHandlerRunsOnce},
	{name: "LeaseLostCancelsBeforeRedelivery", needs: []capability{capRedelivery}, run: testLeaseLostCancelsBeforeRedelivery},
	{name: "MixedAckTimeoutsKeepTheLongestLease", needs: []capability{capRedelivery, capExtend}, run: testMixedAckTimeouts},

	// Key ordering.
	{name: "KeyOrderOneMember", run: testKeyOrderOneMember},
	{name: "GroupLock", run: testGroupLock},
	{name: "KeyOrderOneActiveMember", needs: []capability{capRedelivery}, run: testKeyOrderOneActiveMember},
	{name: "KeyOrderAcrossClose", needs: []capability{capRedelivery}, run: testKeyOrderAcrossClose},
	{name: "KeyOrderAcrossLeaveAndJoin", needs: []capability{capRedelivery}, run: testKeyOrderAcrossLeaveAndJoin},
	{name: "PartitionedKeyOrderAcrossLeaveAndJoin", needs: []capability{capRedelivery}, run: testPartitionedKeyOrderAcrossLeaveAndJoin},
	{name: "KeyOrderRetryHoldsOnlyItsKey", needs: []capability{capRedelivery}, run: testKeyOrderRetryHoldsOnlyItsKey},
	{name: "KeyOrderHotKeyLeavesOtherKeysRunning", run: testKeyOrderHotKeyLeavesOtherKeysRunning},
	{name: "KeyOrderRetryingHeadLeavesOtherKeysRunning", needs: []capability{capRedelivery}, run: testKeyOrderRetryingHeadLeavesOtherKeysRunning},
	{name: "KeyOrderHotKeyLedger", needs: []capability{capRedelivery}, run: testKeyOrderHotKeyLedger},
	{name: "KeyOrderFencedMember", needs: []capability{capRedelivery}, run: testKeyOrderFencedMember},
	{name: "KeyOrderFencedHandlerSucceeds", needs: []capability{capRedelivery}, run: testKeyOrderFencedHandlerSucceeds},
	{name: "KeyOrderLedgerThroughACrash", needs: []capability{capRedelivery}, run: testKeyOrderLedgerThroughACrash},
	{name: "PartitionedLedgerThroughACrash", needs: []capability{capRedelivery}, run: testPartitionedLedgerThroughACrash},
	{name: "KeyHoldLedgerThroughACrash", needs: []capability{capRedelivery}, run: testKeyHoldLedgerThroughACrash},
	{name: "KeyOrderCrashStallsOnlyItsKeys", needs: []capability{capRedelivery}, run: testCrashStallsOnlyItsKeys},
	{name: "KeyOrderCloseWhileAKeyWaits", needs: []capability{capRedelivery}, run: testKeyOrderCloseWhileAKeyWaits},
	{name: "KeyOrderHeadNotGivenBack", needs: []capability{capRedelivery}, run: testKeyOrderHeadNotGivenBack},
	{name: "PartitionStore", run: testPartitionStore},
	{name: "PartitionedGroup", needs: []capability{capRedelivery}, run: testPartitionedGroup},

	// Failure handling.
	{name: "MaxDeliveriesThenDeadLetter", needs: []capability{capRedelivery}, run: testMaxDeliveriesDeadLetter},
	{name: "ExpiredLeasesThenDeadLetter", needs: []capability{capRedelivery}, run: testExpiredLeasesDeadLetter},
	{name: "ReturnedNackSetsTheDelay", needs: []capability{capRedelivery, capNackDelay}, run: testReturnedNack},
	{name: "RetryDelayNeverEarlyOnEveryAttempt", needs: []capability{capRedelivery, capNackDelay}, run: testRetryDelayEveryAttempt},
	{name: "ExpiresAtDeadLettersExpiredMessages", run: testExpiresAt},
	{name: "DeliverAtNeverEarly", needs: []capability{capRedelivery}, run: testDeliverAt},
	{name: "DeliverAtRejected", run: testDeliverAtRejected},
	{name: "DelayedNeverHoldBackImmediate", needs: []capability{capGroups, capRedelivery, capScheduling}, run: testDelayedNeverHoldBackImmediate},
	{name: "PublishDedupWithinTheWindow", needs: []capability{capRedelivery, capPublishDedup}, run: testPublishDedup},
	{name: "SnoozeDoesNotCountAnAttempt", needs: []capability{capRedelivery, capNackDelay}, run: testSnooze},
	{name: "SnoozeWithoutDelayIsRefused", needs: []capability{capRedelivery}, run: testSnoozeWithoutDelay},
	{name: "HugeDelaysWait", needs: []capability{capRedelivery, capNackDelay}, run: testHugeDelaysWait},
	{name: "UnrepresentableTimesRefused", run: testUnrepresentableTimesRefused},
	{name: "RejectedErrorDeadLetters", run: testRejectDeadLetter},
	{name: "RejectDeadLetters", run: testRejectDeadLetters},
	{name: "PanicRecoveredAndRetried", run: testPanicRecovered},
	{name: "ObserverReceivesHandlerErrors", run: testObserverHandlerErrors},

	// Backpressure.
	{name: "MaxInFlightNeverExceeded", run: testMaxInFlight},
	{name: "RateLimiterRespected", run: testRateLimiter},
	{name: "SharedConcurrencyLimiter", run: testSharedConcurrencyLimiter},

	// Shutdown.
	{name: "CloseDrainsAndFlushesAcks", run: testCloseDrains},
	{name: "CloseCancelsHandlersWhenCtxEnds", run: testCloseCancelsHandlers},
	{name: "ResubscribeContinues", needs: []capability{capGroups, capRedelivery}, run: testResubscribeContinues},
	{name: "CreateGroupKeepsWhatComesBeforeItsFirstMember", needs: []capability{capGroups, capRedelivery}, run: testCreateGroupKeepsWhatComesBeforeItsFirstMember},
	{name: "PublishAfterCloseErrClosed", run: testPublishAfterClose},
	{name: "CancelSubscribeCtxStops", run: testCancelSubscribeCtx},
	{name: "CancelStopsFetchingAtOnce", run: testCancelStopsFetching},
	{name: "CloseBoundedByCtx", run: testCloseBoundedByCtx},
	{name: "CloseAfterSubscribeCtxEnded", run: testCloseAfterSubscribeCtxEnded},
	{name: "ConcurrentClosesBounded", run: testConcurrentClosesBounded},
	{name: "CloseAfterBackendFailure", run: testCloseAfterBackendFailure},
	{name: "ShutdownsDoNotBurnAttempts", needs: []capability{capGroups, capRedelivery}, run: testShutdownsDoNotBurnAttempts},
	{name: "NoGoroutineLeak", run: testNoGoroutineLeak},

	// Validation.
	{name: "InvalidTopicRejected", run: testInvalidTopic},
	{name: "InvalidHeaderRejected", run: testInvalidHeader},
	{name: "ReservedHeaderPrefixRejected", run: testReservedHeaderPrefix},
	{name: "OversizedPayloadRejected", run: testOversizedPayload},
	{name: "DefaultPayloadLimit", run: testDefaultPayloadLimit},
	{name: "BatchWithBadMessage", run: testBatchWithBadMessage},
	{name: "ContradictoryOptionsRejected", run: testContradictoryOptions},
	{name: "ContentRoundTripByteExact", run: testContentRoundTrip},

	// Batch handlers.
	{name: "BatchSettlesEachMessage", needs: []capability{capRedelivery}, run: testBatchSettlesEachMessage},
	{name: "BatchBounds", run: testBatchBounds},
	{name: "BatchKeyOrder", run: testBatchKeyOrder},
	{name: "BatchLeaseKeptAlive", needs: []capability{capRedelivery, capExtend}, run: testBatchLeaseKeptAlive},
	{name: "BatchCloseReleases", needs: []capability{capGroups, capRedelivery}, run: testBatchCloseReleases},

	// Health.
	{name: "Ping", run: testPing},
	{name: "SubscriptionHealth", run: testSubscriptionHealth},
	{name: "SubscriptionHealthStandby", needs: []capability{capRedelivery}, run: testSubscriptionHealthStandby},
	{name: "SubscriptionHealthPartitioned", needs: []capability{capRedelivery}, run: testSubscriptionHealthPartitioned},

	// Broadcast subscriptions.
	{name: "BroadcastEverySubscriberGetsEveryMessage", needs: []capability{capBroadcast}, run: testBroadcastEveryMessage},
	{name: "BroadcastCloseLeavesNoGroup", needs: []capability{capBroadcast}, run: testBroadcastCloseLeavesNoGroup},
	{name: "BroadcastDeadSubscriberExpires", needs: []capability{capBroadcast}, run: testBroadcastDeadSubscriberExpires},
	{name: "BroadcastContradictionsRefused", run: testBroadcastContradictionsRefused},

	// Results.
	{name: "ResultRoundTrip", needs: []capability{capResults}, run: testResultRoundTrip},
	{name: "ResultExpires", needs: []capability{capResults}, run: testResultExpires},
	{name: "ResultOnlyWhenAcked", needs: []capability{capResults, capRedelivery}, run: testResultOnlyWhenAcked},
	{name: "ResultRefusals", run: testResultRefusals},

	// Inspection and dead-letter operations (backends with an Inspector).
	{name: "InspectorFigures", needs: []capability{capGroups, capRedelivery}, run: testInspectorFigures},
	{name: "DeleteTopic", needs: []capability{capGroups, capStartOldest}, run: testDeleteTopic},
	{name: "SeekGroup", needs: []capability{capGroups, capRedelivery}, run: testSeekGroup},
	{name: "DeadLetterReplayRoundTrip", needs: []capability{capRedelivery}, run: testDeadLetterReplayRoundTrip},
	{name: "DeadLetterReplayedFailsAgain", needs: []capability{capRedelivery}, run: testDeadLetterReplayedFailsAgain},
	{name: "ContentRefusedBeforeIO", run: testContentRefused},
	{name: "TypedContentRoundTrip", run: testTypedContentRoundTrip},
	{name: "TypedUndecodableDeadLettered", run: testTypedUndecodableDeadLettered},
	{name: "TypedCloudEvents", run: testTypedCloudEvents},
}

// Run runs every case that the backend's Capabilities allow. Each case is a
// subtest on a fresh backend, topic and group, using only the public bus
// API. Cases run one after another (the goroutine-leak case needs a quiet
// process); -short shrinks the message counts.
func Run(t *testing.T, newBackend NewBackend, opts ...Option) {
	t.Helper()
	cfg := config{scale: 1, skip: map[string]string{}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	known := map[string]bool{}
	for _, tc := range cases {
		known[tc.name] = true
	}
	for name := range cfg.skip {
		if !known[name] {
			t.Errorf("conformance: WithSkip names %q, which is not a case of the suite", name)
		}
	}
	for name := range cfg.only {
		if !known[name] {
			t.Errorf("conformance: WithOnly names %q, which is not a case of the suite", name)
		}
	}
	// Capabilities are constant for a backend; read them once.
	probe := newBackend(t)
	caps := probe.Capabilities()
	if err := probe.Close(); err != nil {
		t.Fatalf("conformance: close the probe backend: %v", err)
	}
	for _, tc := range cases {
		if cfg.only != nil && !cfg.only[tc.name] {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			if reason, ok := cfg.skip[tc.name]; ok {
				t.Skipf("skipped by the backend's test: %s", reason)
			}
			if missing := missingCaps(caps, tc.needs); len(missing) > 0 {
				t.Skipf("%s lacks capabilities %v", caps.Name, missing)
			}
			st := &suite{newBackend: newBackend, cfg: cfg, caps: caps}
			defer watchdog(tc.name, caseLimit(st))()
			tc.run(t, st)
		})
	}
}

package rabbitmq_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/rabbitmq"
)

// TestOnOneNode runs the package's tests that need a broker on one
// private RabbitMQ node, one after another.
func TestOnOneNode(t *testing.T) {
	node := rabbittest.Start(t, rabbittest.WithManagement())
	t.Run("Conformance", func(t *testing.T) { testConformance(t, node.InspectURL()) })
	t.Run("Inspect", func(t *testing.T) { testInspect(t, node) })
	t.Run("MalformedEntryDeadLettered", func(t *testing.T) { testMalformedEntryDeadLettered(t, node) })
	t.Run("DeliverAtReachesLaterGroups", func(t *testing.T) { testDeliverAtReachesLaterGroups(t, node) })
	t.Run("LongNamesAreHashed", func(t *testing.T) { testLongNamesAreHashed(t, node) })
	t.Run("DeleteGroup", func(t *testing.T) { testDeleteGroup(t, node) })
	t.Run("ResultQueues", func(t *testing.T) { testResultQueues(t, node) })
	t.Run("BroadcastNeedsManagement", func(t *testing.T) { testBroadcastNeedsManagement(t, node) })
	t.Run("BroadcastSweepDeletesFully", func(t *testing.T) { testBroadcastSweepDeletesFully(t, node) })
	t.Run("BroadcastKilledProcess", func(t *testing.T) { testBroadcastKilledProcess(t, node) })
	t.Run("FreshStreamsAtOnce", func(t *testing.T) { testFreshStreamsAtOnce(t, node) })
	t.Run("UnconfirmedPublishSaysMaybeStored", func(t *testing.T) { testUnconfirmedPublishSaysMaybeStored(t, node) })
	t.Run("PrefetchFollowsMaxInFlight", func(t *testing.T) { testPrefetchFollowsMaxInFlight(t, node) })
	t.Run("ClosedChannelReturnsToTheHead", func(t *testing.T) { testClosedChannelReturnsToTheHead(t, node) })
	t.Run("PendingDeliveries", func(t *testing.T) { testPendingDeliveries(t, node) })
	t.Run("EventsTopicBoundedByAge", func(t *testing.T) { testEventsTopicBoundedByAge(t, node) })
	t.Run("KeyOrderedCloseKeepsAttempts", func(t *testing.T) { testKeyOrderedCloseKeepsAttempts(t, node) })
	t.Run("CloseCountsUnsettled", func(t *testing.T) { testCloseCountsUnsettled(t, node) })
	t.Run("UnlockOnEndedCtxLapses", func(t *testing.T) { testUnlockOnEndedCtxLapses(t, node) })
	t.Run("FaultNodePause", func(t *testing.T) { testFaultNodePause(t, node) })
	t.Run("FaultNetwork", func(t *testing.T) { testFaultNetwork(t, node) })
	t.Run("FaultCloseConnection", func(t *testing.T) { testFaultCloseConnection(t, node) })
	t.Run("FaultLostDeclarations", func(t *testing.T) { testFaultLostDeclarations(t, node) })
	t.Run("SubscriptionCloseBoundedOnBlackhole", func(t *testing.T) { testSubscriptionCloseBoundedOnBlackhole(t, node) })
	t.Run("CancelledChannelOpenKeepsTheConnection", func(t *testing.T) { testCancelledChannelOpenKeepsTheConnection(t, node) })
	t.Run("AbandonedCallsKeepTheConnection", func(t *testing.T) { testAbandonedCallsKeepTheConnection(t, node) })
	t.Run("UnansweredChannelOpenBreaksTheConnection", func(t *testing.T) { testUnansweredChannelOpenBreaksTheConnection(t, node) })
}

func testConformance(t *testing.T, rawURL string) {
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	conformance.Run(t, func(t testing.TB) backend.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := rabbitmq.OpenURL(ctx, u)
		require.NoError(t, err, "open the backend")
		return b
	}, conformance.WithCrashReturnsAtLapse())
}

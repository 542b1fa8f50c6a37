package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/postgres"
)

// TestOnOneServer runs the package's tests that need a server on one
// private server, one after another: the conformance suite (each case
// opens a backend and a pool of its own on it), then the PublishTx cases,
// then the lost-fetch and fault cases, which restart and freeze it.
func TestOnOneServer(t *testing.T) {
	srv := pgtest.Start(t)
	t.Run("Conformance", func(t *testing.T) { testConformance(t, srv.URL()) })
	t.Run("MeasureCrash", func(t *testing.T) { testMeasureCrash(t, srv.URL()) })
	t.Run("PublishTxCommitOrder", func(t *testing.T) { testPublishTxCommitOrder(t, srv.URL()) })
	t.Run("PublishTxThroughKills", func(t *testing.T) { testPublishTxThroughKills(t, srv.URL()) })
	t.Run("BroadcastKilledProcess", func(t *testing.T) { testBroadcastKilledProcess(t, srv.URL()) })
	t.Run("GroupsCountLiveMembers", func(t *testing.T) { testGroupsCountLiveMembers(t, srv.URL()) })
	t.Run("ReceiveAfterDrainedFetch", func(t *testing.T) { testReceiveAfterDrainedFetch(t, srv.URL()) })
	t.Run("AckLeavesPlanCacheMode", func(t *testing.T) { testAckLeavesPlanCacheMode(t, srv.URL()) })
	t.Run("NackNotifiesOtherProcesses", func(t *testing.T) { testNackNotifiesOtherProcesses(t, srv.URL()) })
	t.Run("PublishTxLateCommit", func(t *testing.T) { testPublishTxLateCommit(t, srv.URL()) })
	t.Run("PublishWaitsForNewGroup", func(t *testing.T) { testPublishWaitsForNewGroup(t, srv.URL()) })
	t.Run("LeanPublish", func(t *testing.T) { testLeanPublish(t, srv.URL()) })
	t.Run("MigrateRefusesV1", func(t *testing.T) { testMigrateRefusesV1(t, srv.URL()) })
	t.Run("NewOverACallerPool", func(t *testing.T) { testNewOverACallerPool(t, srv.URL()) })
	t.Run("PublishEncodings", func(t *testing.T) { testPublishEncodings(t, srv.URL()) })
	t.Run("ReceiveDecodesBothFormats", func(t *testing.T) { testReceiveDecodesBothFormats(t, srv.URL()) })
	t.Run("TrimKeepsHeld", func(t *testing.T) { testTrimKeepsHeld(t, srv.URL()) })
	t.Run("TrimDeletesByRow", func(t *testing.T) { testTrimDeletesByRow(t, srv.URL()) })
	t.Run("PublisherTrimsSettled", func(t *testing.T) { testPublisherTrimsSettled(t, srv.URL()) })
	t.Run("CloseTrimsSettled", func(t *testing.T) { testCloseTrimsSettled(t, srv.URL()) })
	t.Run("BoundRetention", func(t *testing.T) { testBoundRetention(t, srv.URL()) })
	t.Run("EventsTopicBounded", func(t *testing.T) { testEventsTopicBounded(t, srv.URL()) })
	t.Run("LeasePartialAckExpiry", func(t *testing.T) { testLeasePartialAckExpiry(t, srv.URL()) })
	t.Run("LeaseSettleOne", func(t *testing.T) { testLeaseSettleOne(t, srv.URL()) })
	t.Run("LeaseConcurrentSettlements", func(t *testing.T) { testLeaseConcurrentSettlements(t, srv.URL()) })
	t.Run("MigrateV2ToV3", func(t *testing.T) { testMigrateV2ToV3(t, srv.URL()) })
	t.Run("LostFetch", func(t *testing.T) { testLostFetch(t, srv.URL()) })
	t.Run("LostFetchSparesOtherProcesses", func(t *testing.T) { testLostFetchSparesOtherProcesses(t, srv.URL()) })
	t.Run("LostFetchEndsIdleProcess", func(t *testing.T) { testLostFetchEndsIdleProcess(t, srv.URL()) })
	t.Run("TerminatedConnections", func(t *testing.T) { testTerminatedConnections(t, srv.URL()) })
	t.Run("FaultNetwork", func(t *testing.T) { testFaultNetwork(t, srv) })
	t.Run("FaultBrokerPause", func(t *testing.T) { testFaultBrokerPause(t, srv) })
}

// openURL opens a backend from u.
func openURL(ctx context.Context, u *url.URL) (backend.Backend, error) {
	return postgres.OpenURL(ctx, u)
}

func testConformance(t *testing.T, rawURL string) {
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	conformance.Run(t, func(t testing.TB) backend.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := postgres.OpenURL(ctx, u)
		require.NoError(t, err, "open the backend")
		return b
	})
}

// testMeasureCrash measures a kill of a key-ordered member with the
// default ack timeout (only with BUS_MEASURE_CRASH set).
func testMeasureCrash(t *testing.T, rawURL string) {
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	nb := func(t testing.TB) backend.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := postgres.OpenURL(ctx, u)
		require.NoError(t, err, "open the backend")
		return b
	}
	t.Run("Locked", func(t *testing.T) { conformance.MeasureCrash(t, nb, 1) })
	t.Run("Partitioned", func(t *testing.T) { conformance.MeasureCrash(t, nb, 4) })
}

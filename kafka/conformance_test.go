package kafka_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
	"github.com/eventbus-go/bus/kafka"
)

// leakSkip skips the suite's goroutine-leak case in the runs that are
// parallel with another: the other run's goroutines would count as
// leaked. TestNoGoroutineLeak runs the case alone, before them.
var leakSkip = conformance.WithSkip("runs in parallel with the other broker's suite, whose goroutines it would count; TestNoGoroutineLeak runs it alone", "NoGoroutineLeak")

// TestNoGoroutineLeak runs the suite's goroutine-leak case on a broker of
// its own while no other test runs: TestOnOneBroker and TestOnThreeBrokers
// are parallel and wait for it.
func TestNoGoroutineLeak(t *testing.T) {
	node := kafkatest.Start(t)
	testConformance(t, node.URL()+"?session_timeout=6s", conformance.WithOnly("NoGoroutineLeak"))
}

// TestOnOneBroker runs the package's tests that need a broker on one
// private Kafka broker, one after another, in parallel with
// TestOnThreeBrokers.
func TestOnOneBroker(t *testing.T) {
	t.Parallel()
	node := kafkatest.Start(t)
	testSuite(t, node.URL())
	t.Run("RevokeWaitsForDeliveries", func(t *testing.T) { testRevokeWaitsForDeliveries(t, node) })
	t.Run("KeyOrderLedgerThroughACrash", func(t *testing.T) { testKeyOrderLedgerThroughACrash(t, node) })
	t.Run("URLParameters", func(t *testing.T) { testURLParameters(t, node) })
	t.Run("PartitionedTopic", func(t *testing.T) { testPartitionedTopic(t, node) })
	t.Run("EventsTopicBoundedByAge", func(t *testing.T) { testEventsTopicBoundedByAge(t, node) })
	t.Run("FaultBrokerPause", func(t *testing.T) { testFaultBrokerPause(t, node) })
	t.Run("FaultNetwork", func(t *testing.T) { testFaultNetwork(t, node) })
}

// testSuite runs the conformance suite on the brokers of rawURL: the
// whole suite on topics of one partition, then the cases about sharing a
// group's load and key order across members on topics of four.
func testSuite(t *testing.T, rawURL string) {
	t.Run("Conformance", func(t *testing.T) {
		testConformance(t, rawURL+"?session_timeout=6s", leakSkip,
			conformance.WithSkip("a Kafka group shares its load by partition: on a topic of one partition one member is active; the case runs on topics of four partitions in ConformanceFourPartitions", "ConsumerGroupSharesLoad"))
	})
	t.Run("ConformanceFourPartitions", func(t *testing.T) {
		testConformance(t, rawURL+"?session_timeout=6s&partitions=4", conformance.WithOnly("ConsumerGroupSharesLoad",
			"KeyOrderOneActiveMember", "KeyOrderAcrossClose", "KeyOrderAcrossLeaveAndJoin"))
	})
}

func testConformance(t *testing.T, rawURL string, opts ...conformance.Option) {
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	conformance.Run(t, func(t testing.TB) backend.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := kafka.OpenURL(ctx, u)
		require.NoError(t, err, "open the backend")
		return b
	}, opts...)
}

// testURLParameters opens the broker through bus.Open with parameters.
func testURLParameters(t *testing.T, node *kafkatest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, node.URL()+"?client_id=bus-test&dial_timeout=2s&request_timeout=5s&partitions=3")
	require.NoError(t, err, "bus.Open opens kafka:// URLs")
	defer b.Close(context.Background())
	require.NoError(t, b.Publish(ctx, "url.params", &bus.Message{Payload: []byte("x")}))
}

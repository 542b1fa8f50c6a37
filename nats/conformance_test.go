package nats_test

import (
	"os"
	"testing"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// embeddedSkip skips the suite's goroutine-leak case when the server runs
// in the test process: the server starts goroutines for every stream and
// consumer the case creates, which the case would count as the backend's.
// TestNoGoroutineLeakWithEmbeddedServer checks the backend alone instead,
// and TestConformanceExternal runs the case against an outside server.
var embeddedSkip = conformance.WithSkip("the embedded nats-server's own goroutines are in the test process; see TestNoGoroutineLeakWithEmbeddedServer", "NoGoroutineLeak")

func runConformance(t *testing.T, url string, o busnats.Options, opts ...conformance.Option) {
	o = isolated(t, url, o)
	conformance.Run(t, func(t testing.TB) backend.Backend {
		return connect(t, url, o)
	}, opts...)
}

// The JetStream runs are parallel: each has a server of its own, and
// their cases mostly wait on leases, so together they take about as long
// as the cluster run alone.
func TestConformanceJetStream(t *testing.T) {
	t.Parallel()
	runConformance(t, natstest.Start(t).URL(), busnats.Options{}, embeddedSkip)
}

func TestConformanceJetStreamSharedStream(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: the per-topic run covers the backend; this one covers the shared-stream naming and streams without schedules")
	}
	// Without schedules: the fallback of streams that cannot store them
	// (interest retention, bind-only), where the bus holds early
	// deliveries.
	runConformance(t, natstest.Start(t).URL(), busnats.WithoutSchedules(busnats.Options{StreamMode: busnats.StreamShared}), embeddedSkip)
}

func TestConformanceCore(t *testing.T) {
	runConformance(t, natstest.Start(t).URL(), busnats.Options{CoreNATS: true}, embeddedSkip)
}

// TestConformanceExternal runs the suite in both modes against the server
// at $BUS_NATS_URL, when set.
func TestConformanceExternal(t *testing.T) {
	url := os.Getenv(natstest.EnvURL)
	if url == "" {
		t.Skipf("%s is not set", natstest.EnvURL)
	}
	t.Run("JetStream", func(t *testing.T) { runConformance(t, url, busnats.Options{}) })
	t.Run("Core", func(t *testing.T) { runConformance(t, url, busnats.Options{CoreNATS: true}) })
}

// TestConformanceJetStreamCluster runs the suite on a 3-node cluster of
// embedded servers with R3 streams, as NATS runs in production.
func TestConformanceJetStreamCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: the single-server runs cover the backend; this one covers replicated streams")
	}
	c := natstest.StartCluster(t, 3)
	opts := []conformance.Option{embeddedSkip}
	if raceDetector {
		// Three instrumented servers in the test process: Raft
		// replication and the JetStream API answer several times slower,
		// past the suite's deadlines. Under it, a stream lookup right
		// after the dead-letter stream was created sometimes gets no
		// answer for as long as the case waits; without the race
		// detector the case passes on the cluster, and it passes on a
		// single server either way.
		opts = append(opts, conformance.WithTimeScale(3),
			conformance.WithSkip("the instrumented 3-node cluster does not answer the dead-letter stream's lookup in time under -race", "DeadLetterReplayRoundTrip"))
	}
	runConformance(t, c.URL(), busnats.Options{Replicas: 3}, opts...)
}

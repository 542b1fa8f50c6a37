package sqs_test

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/testkit/awstest"
	"github.com/eventbus-go/bus/sqs"
)

// leakSkip skips the suite's goroutine-leak case in the two suites that
// run in parallel: each would count the other's goroutines as leaked.
// TestNoGoroutineLeak runs the case alone, before them.
var leakSkip = conformance.WithSkip("runs in parallel with the other suite, whose goroutines it would count; TestNoGoroutineLeak runs it alone", "NoGoroutineLeak")

// TestNoGoroutineLeak runs the suite's goroutine-leak case on standard
// and FIFO topics while no other test runs: the parallel suites wait for
// it.
func TestNoGoroutineLeak(t *testing.T) {
	for _, fifo := range []string{"", "true"} {
		runConformance(t, fifo, conformance.WithOnly("NoGoroutineLeak"))
	}
}

// TestConformance runs the conformance suite on standard topics and
// queues against a private moto server. SQS visibility timeouts are
// whole seconds: the time scale makes the suite's shortest lease 1.5 s
// (2 s at SQS), room for a loaded machine to keep leases alive.
func TestConformance(t *testing.T) {
	t.Parallel()
	runConformance(t, "", leakSkip,
		conformance.WithSkip("standard SQS queues do not keep publish order, so the bus's key lines cannot restore it; per-key order needs FIFO topics and queues (TestConformanceFIFO)",
			"KeyOrderOneMember", "KeyOrderAcrossClose", "KeyOrderRetryHoldsOnlyItsKey", "KeyOrderHotKeyLeavesOtherKeysRunning",
			"KeyOrderRetryingHeadLeavesOtherKeysRunning", "KeyOrderHotKeyLedger", "BatchKeyOrder", "PublishAsyncKeyOrder"))
}

// TestConformanceFIFO runs the conformance suite on FIFO topics and
// queues (fifo=true), against a moto server of its own, in parallel with
// TestConformance.
func TestConformanceFIFO(t *testing.T) {
	t.Parallel()
	runConformance(t, "true", leakSkip,
		conformance.WithSkip("SQS hands a message group to a member only while a message of it is in flight, so between two messages a key may pass to the other member; each key's order holds (KeyOrderAcrossLeaveAndJoin)",
			"KeyOrderOneActiveMember"),
		conformance.WithSkip("a release counts as an attempt: SQS keeps each message's receive count and changes no message in place, and a copy would go behind the later messages of its group (no backend.Releaser)",
			"KeyOrderAcrossClose"),
		conformance.WithSkip("a receive still running when its member closes hands out what the close released, and a FIFO queue takes it back only by visibility, which counts one more attempt (no backend.Releaser)",
			"BatchCloseReleases"))
}

// runConformance runs the suite against the server of BUS_SQS_URL, or a
// private moto server, with fifo as the URL's fifo parameter.
func runConformance(t *testing.T, fifo string, opts ...conformance.Option) {
	raw := os.Getenv("BUS_SQS_URL")
	if raw == "" {
		raw = awstest.Start(t).URL()
	}
	u, err := url.Parse(raw)
	require.NoError(t, err)
	if fifo != "" {
		q := u.Query()
		q.Set("fifo", fifo)
		u.RawQuery = q.Encode()
	}
	opts = append(opts, conformance.WithTimeScale(3),
		conformance.WithSkip("the moto emulator does not take 5000 single-message publishes from 50 publishers within the case's deadline",
			"ConcurrentPublishersNoLoss"))
	conformance.Run(t, func(t testing.TB) backend.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := sqs.OpenURL(ctx, u)
		require.NoError(t, err, "open the backend")
		return b
	}, opts...)
}

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

// TestConformance runs the conformance suite against a private moto
// server. SQS visibility timeouts are whole seconds: the time scale makes
// the suite's shortest lease one second.
func TestConformance(t *testing.T) {
	awstest.SetDummyCredentials(t)
	raw := os.Getenv("BUS_SQS_URL")
	if raw == "" {
		raw = awstest.Start(t).URL()
	}
	u, err := url.Parse(raw)
	require.NoError(t, err)
	conformance.Run(t, func(t testing.TB) backend.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := sqs.OpenURL(ctx, u)
		require.NoError(t, err, "open the backend")
		return b
	}, conformance.WithTimeScale(2),
		conformance.WithSkip("standard SQS queues do not keep publish order, so the bus's key lines cannot restore it; per-key order needs FIFO topics and queues, which the backend does not build yet",
			"KeyOrderOneMember", "KeyOrderAcrossClose", "KeyOrderRetryHoldsOnlyItsKey", "KeyOrderHotKeyLeavesOtherKeysRunning",
			"KeyOrderRetryingHeadLeavesOtherKeysRunning", "KeyOrderHotKeyLedger", "BatchKeyOrder", "PublishAsyncKeyOrder"),
		conformance.WithSkip("the moto emulator does not take 5000 single-message publishes from 50 publishers within the case's deadline",
			"ConcurrentPublishersNoLoss"))
}

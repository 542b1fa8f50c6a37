package nats_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/internal/testkit/broadcasttest"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
)

func TestMain(m *testing.M) {
	if broadcasttest.IsChild() {
		// Re-executed as a broadcast subscriber by TestBroadcastKilledProcess.
		broadcasttest.RunChild()
		return
	}
	goleak.VerifyTestMain(m, natstest.LeakIgnores()...)
}

package rabbitmq_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/internal/testkit/broadcasttest"
)

func TestMain(m *testing.M) {
	if broadcasttest.IsChild() {
		// Re-executed as a broadcast subscriber by BroadcastKilledProcess.
		broadcasttest.RunChild()
		return
	}
	goleak.VerifyTestMain(m)
}

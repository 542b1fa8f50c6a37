package postgres_test

import (
	"os"
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
	if role := os.Getenv(childEnv); role != "" {
		// Re-executed as a process the crash tests kill.
		runChild(role)
		return
	}
	goleak.VerifyTestMain(m)
}

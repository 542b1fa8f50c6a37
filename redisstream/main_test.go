package redisstream_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/internal/testkit/broadcasttest"
)

// quietLogger drops go-redis's own log lines (dial failures while the
// fault tests hold a server down); the tests assert on observer events.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	if broadcasttest.IsChild() {
		// Re-executed as a broadcast subscriber by TestBroadcastKilledProcess.
		broadcasttest.RunChild()
		return
	}
	if os.Getenv(childEnv) != "" {
		// Re-executed as a crashing consumer by the fault tests.
		runChild()
		return
	}
	goleak.VerifyTestMain(m)
}

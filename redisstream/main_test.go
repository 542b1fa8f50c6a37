package redisstream_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quietLogger drops go-redis's own log lines (dial failures while the
// fault tests hold a server down); the tests assert on observer events.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{})
	if os.Getenv(childEnv) != "" {
		// Re-executed as a crashing consumer by the fault tests.
		runChild()
		return
	}
	goleak.VerifyTestMain(m)
}

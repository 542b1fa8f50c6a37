package redisstream_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// Re-executed as a crashing consumer by the fault tests.
		runChild()
		return
	}
	goleak.VerifyTestMain(m)
}

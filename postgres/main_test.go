package postgres_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		// Re-executed as a process the crash tests kill.
		runChild(role)
		return
	}
	goleak.VerifyTestMain(m)
}

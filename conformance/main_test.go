package conformance_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(brokenEnv) != "" {
		// A child run of the self-test: its broken backend may leak on
		// purpose; the parent judges the run by its failures.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}

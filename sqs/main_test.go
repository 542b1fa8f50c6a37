package sqs_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/internal/testkit/awstest"
)

// TestMain gives the whole process the emulator's dummy credentials, so
// that the conformance suites run in parallel (t.Setenv refuses parallel
// tests).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "bus-sqs-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := awstest.SetDummyCredentialsForProcess(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		_ = os.RemoveAll(dir)
		os.Exit(code)
	}))
}

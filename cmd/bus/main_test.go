package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/internal/testkit/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.LeakIgnores()...)
}

// runCLI runs one command line in-process and returns its exit code,
// stdout and stderr.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, bytes.NewBufferString(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRunWithoutCommandPrintsUsageAndExitsTwo(t *testing.T) {
	code, _, stderr := runCLI(t, "")
	assert.Equal(t, exitUsage, code, "no command is a usage error")
	assert.Contains(t, stderr, "bus bench", "usage lists the commands")
}

func TestRunUnknownCommandExitsTwo(t *testing.T) {
	code, _, stderr := runCLI(t, "", "frobnicate")
	assert.Equal(t, exitUsage, code, "unknown command is a usage error")
	assert.Contains(t, stderr, `unknown command "frobnicate"`)
}

func TestRunHelpExitsZero(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{name: "help command", args: []string{"help"}},
		{name: "bench -h", args: []string{"bench", "-h"}},
		{name: "publish -h", args: []string{"publish", "-h"}},
		{name: "tail -h", args: []string{"tail", "-h"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, "", tt.args...)
			assert.Equal(t, exitOK, code, "asking for help is not an error")
			assert.Contains(t, stdout+stderr, "Usage", "help prints usage")
		})
	}
}

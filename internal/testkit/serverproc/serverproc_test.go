package serverproc_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/serverproc"
)

func TestWaitReadyReturnsWhenReadyAndReportsExitAndTimeoutWithTheLog(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "server.log")
	require.NoError(t, os.WriteFile(logPath, []byte("FATAL: port in use\n"), 0o600))
	calls := 0
	err := serverproc.WaitReady("srv", time.Minute, nil, logPath, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 3, calls, "polled until ready")

	exited := make(chan struct{})
	close(exited)
	err = serverproc.WaitReady("srv", time.Minute, exited, logPath, func() error { return errors.New("refused") })
	assert.ErrorContains(t, err, "srv exited at start: FATAL: port in use", "an exited process is reported with its log")
	assert.ErrorIs(t, err, serverproc.ErrExitedAtStart, "a harness can tell an exit at start")

	err = serverproc.WaitReady("srv", 30*time.Millisecond, nil, filepath.Join(t.TempDir(), "none.log"), func() error { return errors.New("refused") })
	assert.ErrorContains(t, err, "did not answer within 30ms (refused): (no log)", "a timeout says the last error and that there is no log")
}

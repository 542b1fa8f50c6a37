package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runError is the error of run n of an operation under retry.
type runError struct{ n int }

func (e runError) Error() string { return fmt.Sprintf("run %d failed", e.n) }

func isRunError(err error) bool { return errors.As(err, new(runError)) }

// TestRetryRunsAgainOnlyWhatItMay: retry runs an operation again while
// its error is one to retry, stops at its first success or other error,
// and, once its total is spent or ctx ends, returns the operation's last
// error, not a timeout of its own.
func TestRetryRunsAgainOnlyWhatItMay(t *testing.T) {
	quick := backoffPolicy{first: time.Millisecond, most: 2 * time.Millisecond, total: 10 * time.Second}

	runs := 0
	err := retry(context.Background(), quick, isRunError, func() error {
		if runs++; runs < 3 {
			return runError{runs}
		}
		return nil
	})
	require.NoError(t, err, "the third run succeeds")
	assert.Equal(t, 3, runs, "a success ends the runs")

	runs = 0
	other := errors.New("refused for good")
	err = retry(context.Background(), quick, isRunError, func() error { runs++; return other })
	require.ErrorIs(t, err, other)
	assert.Equal(t, 1, runs, "an error that is not to retry is returned at once")

	runs = 0
	short := backoffPolicy{first: time.Millisecond, most: 4 * time.Millisecond, total: 300 * time.Millisecond}
	start := time.Now()
	err = retry(context.Background(), short, isRunError, func() error { runs++; return runError{runs} })
	elapsed := time.Since(start)
	require.Equal(t, runError{runs}, err, "the last run's error is returned")
	assert.GreaterOrEqual(t, runs, 2, "the operation ran again within its total")
	assert.Less(t, elapsed, short.total+time.Second, "no run starts after the total (the grace is scheduling on a loaded machine)")

	runs = 0
	ctx, cancel := context.WithCancel(context.Background())
	err = retry(ctx, backoffPolicy{first: time.Hour, most: time.Hour, total: 2 * time.Hour}, isRunError, func() error {
		runs++
		cancel()
		return runError{runs}
	})
	require.Equal(t, runError{1}, err, "an ended ctx returns the last run's error")
	assert.Equal(t, 1, runs)
}

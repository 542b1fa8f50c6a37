package rawclient_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/rawclient"
)

func TestLoopReportsItsFailureButNotTheEndOfItsStop(t *testing.T) {
	boom := errors.New("boom")
	failing := rawclient.StartLoop(func(context.Context) error { return boom })
	<-failing.Ended()
	assert.ErrorIs(t, failing.Err(), boom, "a loop that fails on its own reports why")
	require.NoError(t, failing.Stop(context.Background()), "stopping an ended loop returns at once")

	stopped := rawclient.StartLoop(func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	require.NoError(t, stopped.Stop(context.Background()), "Stop waits for the loop")
	assert.NoError(t, stopped.Err(), "the error a loop returns once stopped is no failure")
	select {
	case <-stopped.Ended():
		t.Fatal("a stopped loop did not end on its own")
	default:
	}
}

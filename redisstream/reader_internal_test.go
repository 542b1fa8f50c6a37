package redisstream

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/redistest"
)

// A read whose ctx ended before its connection was opened (a Receive
// cancelled by a closing subscription) returns at once and leaves nothing
// behind that Backend.Close would wait for.
func TestAReadWhoseCtxHasEndedLeavesNothingForCloseToWaitFor(t *testing.T) {
	client := redis.NewClient(redistest.Options(t))
	t.Cleanup(func() { _ = client.Close() })
	b, err := New(client, nil)
	require.NoError(t, err, "new backend")
	r := &reader{b: b, stream: "bus:{reader-test}"}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rr := r.read(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{r.stream, ">"}, Count: 1, Block: time.Second})
	require.ErrorIs(t, rr.err, context.Canceled, "the read reports its ended ctx")

	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err, "close the backend")
	case <-time.After(5 * time.Second):
		t.Fatal("Backend.Close did not return within 5s: it still waits for the read whose ctx had ended")
	}
}

// An fn the call gave up on gets its release once it returns, and not
// before; Backend.Close's wait (b.reads) covers the release.
func TestAsyncOrReleaseReleasesWhatAnAbandonedFnAcquired(t *testing.T) {
	b := &Backend{}
	unblock := make(chan struct{})
	released := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() {
		<-started
		cancel()
	}()
	err := b.asyncOrRelease(ctx, func(context.Context) error {
		close(started)
		<-unblock
		return nil
	}, func() { close(released) })
	require.ErrorIs(t, err, context.Canceled, "the call returns when its ctx ends")

	select {
	case <-released:
		t.Fatal("released while fn still runs")
	default:
	}
	waited := make(chan struct{})
	go func() {
		b.reads.Wait()
		close(waited)
	}()
	close(unblock)
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("release did not run within 5s of fn returning")
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("b.reads still counts the release 5s after it ran")
	}
}

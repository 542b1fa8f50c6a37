package bus

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// acquired reports whether acquire returned within d, and its error.
func acquired(done <-chan error, d time.Duration) (bool, error) {
	select {
	case err := <-done:
		return true, err
	case <-time.After(d):
		return false, nil
	}
}

func TestAsyncWindowWakesAWaiterOnceItsShareIsFree(t *testing.T) {
	w := newAsyncWindow(8, 3)
	bg := context.Background()
	for range 8 {
		require.NoError(t, w.acquire(bg), "a slot of a window with room")
	}
	done := make(chan error, 1)
	go func() { done <- w.acquire(bg) }()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.room != nil
	}, 10*time.Second, time.Millisecond, "the call waits for room")
	w.release(2)
	ok, _ := acquired(done, 20*time.Millisecond)
	assert.False(t, ok, "a waiter is not woken while fewer than 3 slots are free")
	w.release(1)
	ok, err := acquired(done, 10*time.Second)
	require.True(t, ok, "a waiter is woken once 3 slots are free")
	require.NoError(t, err, "acquire")
	w.mu.Lock()
	used := w.used
	w.mu.Unlock()
	assert.Equal(t, 6, used, "the window counts the waiter's slot")
}

func TestAsyncWindowWaitEndsWithCtx(t *testing.T) {
	w := newAsyncWindow(1, 1)
	require.NoError(t, w.acquire(context.Background()), "the only slot")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.acquire(ctx), context.DeadlineExceeded, "a full window waits until ctx ends")
	w.release(1)
	require.NoError(t, w.acquire(context.Background()), "the slot given back")
}

package bus

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type flushKey struct{}

// A flush chunk's ctx behaves as context.WithDeadline of its parent,
// cancelled when the chunk ends, whether or not the backend made it wait
// on Done.
func TestFlushCtxActsAsADeadlineCancelledAtEnd(t *testing.T) {
	parent := context.WithValue(context.Background(), flushKey{}, "v")
	before := time.Now()
	lazy, waited := newFlushCtx(parent), newFlushCtx(parent)
	for _, c := range []*flushCtx{lazy, waited} {
		d, ok := c.Deadline()
		require.True(t, ok, "a flush chunk has a deadline")
		assert.WithinDuration(t, before.Add(ackFlushTimeout), d, time.Second, "the deadline is ackFlushTimeout away")
		assert.NoError(t, c.Err(), "a chunk under way is not cancelled")
		assert.Equal(t, "v", c.Value(flushKey{}), "values come from the parent")
	}
	done := waited.Done()
	select {
	case <-done:
		t.Fatal("Done is closed before the chunk ended")
	default:
	}
	lazy.end()
	waited.end()
	assert.ErrorIs(t, lazy.Err(), context.Canceled, "an ended chunk's ctx is cancelled")
	assert.ErrorIs(t, waited.Err(), context.Canceled, "an ended chunk's ctx is cancelled")
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Done is not closed when the chunk ends")
	}
	select {
	case <-lazy.Done():
	case <-time.After(time.Second):
		t.Fatal("Done made after the end is not closed")
	}
}

// The parent's cancellation and an earlier deadline reach the chunk's
// ctx.
func TestFlushCtxFollowsItsParent(t *testing.T) {
	soon := time.Now().Add(ackFlushTimeout / 2)
	parent, cancel := context.WithDeadline(context.Background(), soon)
	c := newFlushCtx(parent)
	d, _ := c.Deadline()
	assert.True(t, d.Equal(soon), "the parent's deadline when it is the earlier")
	cancel()
	assert.ErrorIs(t, c.Err(), context.Canceled, "the parent's cancellation shows without Done")
	<-c.Done()
	assert.ErrorIs(t, c.Err(), context.Canceled, "and through the real ctx")
	c.end()
}

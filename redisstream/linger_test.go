package redisstream

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/redistest"
	"github.com/eventbus-go/bus/observer"
)

// TestReadLingersOnlyWhileTheStreamIsBusy walks Receive through a quiet
// stream, a busy one and a backlog, and checks which reads wait
// Options.ReadLinger first; then that a linger ends with its ctx and reads
// nothing.
func TestReadLingersOnlyWhileTheStreamIsBusy(t *testing.T) {
	defer time.AfterFunc(time.Minute, func() { panic("watchdog: " + t.Name() + " still running after 1m") }).Stop()
	ctx := context.Background()
	c := redis.NewClient(redistest.Options(t))
	defer c.Close()
	const linger = 5 * time.Millisecond
	b, err := New(c, &Options{Prefix: fmt.Sprintf("linger%d", time.Now().UnixNano()), ReadLinger: linger})
	require.NoError(t, err)
	defer b.Close()
	bsub, err := b.Subscribe(ctx, "t", backend.SubscribeConfig{Group: "g", AckTimeout: 30 * time.Second, MaxInFlight: 100, MaxDeliveries: 3, Observer: observer.Nop})
	require.NoError(t, err)
	defer bsub.Close()
	sub := bsub.(*subscription)
	var waits []time.Duration
	sub.lingerWait = func(_ context.Context, d time.Duration) error {
		waits = append(waits, d)
		return nil
	}

	seq := 0
	publish := func(n int) {
		t.Helper()
		msgs := make([]*backend.Message, n)
		for i := range msgs {
			seq++
			msgs[i] = &backend.Message{ID: strconv.Itoa(seq), Payload: []byte("x")}
		}
		require.NoError(t, b.Publish(ctx, "t", msgs))
	}
	// receive reads once, after a publish that put n entries in the
	// stream, expects all n and acks them.
	receive := func(max, n int) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := sub.Receive(rctx, max)
		require.NoError(t, err)
		require.Len(t, got, n, "the read takes every entry published before it")
		ids := make([]backend.AckID, len(got))
		for i, m := range got {
			ids[i] = m.AckID
		}
		require.NoError(t, sub.Ack(ctx, ids))
	}

	publish(3)
	receive(100, 3) // no read before it
	publish(10)
	receive(100, 10) // the last read found 3: a quiet stream
	assert.Empty(t, waits, "no read lingers after a read that found fewer than %d", readLingerMin)

	publish(10)
	receive(100, 10) // the last read found 10 of 100: busy
	assert.Equal(t, []time.Duration{linger}, waits, "a read after a busy one lingers ReadLinger")

	publish(10)
	receive(15, 10) // the last read found 10 of 100 again
	require.Len(t, waits, 2)
	publish(1)
	receive(100, 1) // the last read found 10 of 15: half its count or more
	assert.Len(t, waits, 2, "no read lingers after one that found half its count or more (a backlog)")

	// A real linger, longer than the ctx: Receive returns with the ctx's
	// error and takes nothing.
	publish(10)
	receive(100, 10)
	sub.lingerWait = nil
	b.opts.ReadLinger = time.Minute
	publish(5)
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	got, err := sub.Receive(rctx, 100)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Empty(t, got)
	pending, err := c.XPending(ctx, sub.keys.stream, "g").Result()
	require.NoError(t, err)
	assert.Zero(t, pending.Count, "a read whose ctx ended while it lingered takes no entry")
}

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
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
)

// TestReadLingersOnlyWhileTheStreamIsBusy checks which reads wait
// Options.ReadLinger first, from what the last two reads found and when
// they started.
func TestReadLingersOnlyWhileTheStreamIsBusy(t *testing.T) {
	t.Parallel()
	const wait = 5 * time.Millisecond
	start := time.Unix(1_700_000_000, 0)
	tests := []struct {
		name                    string
		readLinger              time.Duration
		prevFound, found, asked int
		// window is from the start of the read before the last to now;
		// first says there was no read before the last.
		window time.Duration
		first  bool
		want   bool
	}{
		{name: "busy: 8 or more found, fast, under half the count", readLinger: wait, prevFound: 16, found: 16, asked: 256, window: 300 * time.Microsecond, want: true},
		{name: "quiet: fewer than 8 found", readLinger: wait, prevFound: 7, found: 7, asked: 256, window: 10 * time.Microsecond},
		{name: "moderately busy: 20 a millisecond", readLinger: wait, prevFound: 1, found: 15, asked: 256, window: 800 * time.Microsecond},
		{name: "just at the rate", readLinger: wait, prevFound: 25, found: 25, asked: 256, window: time.Millisecond, want: true},
		{name: "a backlog: half the count or more", readLinger: wait, prevFound: 128, found: 128, asked: 256, window: 100 * time.Microsecond},
		{name: "turned off", readLinger: -1, prevFound: 16, found: 16, asked: 256, window: 100 * time.Microsecond},
		{name: "first read: no rate yet", readLinger: wait, found: 16, asked: 256, first: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := linger{found: tt.found, asked: tt.asked, prevFound: tt.prevFound, prevStarted: start}
			if tt.first {
				l.prevStarted = time.Time{}
			}
			assert.Equal(t, tt.want, l.due(start.Add(tt.window), tt.readLinger), "whether the read lingers")
		})
	}
}

// TestReadLingerFollowsReceiveAndEndsWithCtx drives the decision through
// Receive against a server: what each read found and when it started
// reach the next decision, a busy stream makes the next read wait
// ReadLinger and then take what arrived, and a linger whose ctx ends
// returns the ctx's error and reads nothing.
func TestReadLingerFollowsReceiveAndEndsWithCtx(t *testing.T) {
	defer time.AfterFunc(time.Minute, func() { panic("watchdog: " + t.Name() + " still running after 1m") }).Stop()
	ctx := context.Background()
	c := redis.NewClient(redistest.Options(t))
	defer c.Close()
	b, err := New(c, &Options{Prefix: fmt.Sprintf("linger%d", time.Now().UnixNano()), ReadLinger: -1})
	require.NoError(t, err)
	defer b.Close()
	bsub, err := b.Subscribe(ctx, "t", backend.SubscribeConfig{Group: "g", AckTimeout: 30 * time.Second, MaxInFlight: 100, MaxDeliveries: 3, Observer: observer.Nop()})
	require.NoError(t, err)
	defer bsub.Close()
	sub := bsub.(*subscription)

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
	receive := func(n int) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got, err := sub.Receive(rctx, 100)
		require.NoError(t, err)
		require.Len(t, got, n, "the read takes every entry published before it")
		ids := make([]backend.AckID, len(got))
		for i, m := range got {
			ids[i] = m.AckID
		}
		require.NoError(t, sub.Ack(ctx, ids))
	}
	const wait = 5 * time.Millisecond
	// busyAfter: whether a read 200µs after the start of the read before
	// the last lingers, by what the subscription recorded.
	busyAfter := func() bool { return sub.linger.due(sub.linger.prevStarted.Add(200*time.Microsecond), wait) }

	publish(10)
	receive(10)
	assert.Equal(t, 10, sub.linger.found, "the read's entries are recorded")
	assert.Equal(t, 100, sub.linger.asked, "the read's COUNT is recorded")
	publish(3)
	receive(3)
	assert.Equal(t, 10, sub.linger.prevFound, "the read before's entries move back")
	assert.True(t, sub.linger.started.After(sub.linger.prevStarted), "each read records its start")
	assert.False(t, busyAfter(), "after a read that found 3 the stream is quiet")
	publish(10)
	receive(10)
	assert.True(t, busyAfter(), "13 entries in 200µs, the last read 10: busy")

	// A busy stream whatever the machine's pace: the window of the last
	// two reads ends before it started.
	busy := func() { sub.linger.prevStarted = time.Now().Add(time.Hour) }
	b.opts.ReadLinger = 20 * time.Millisecond
	busy()
	publish(10)
	start := time.Now()
	receive(10)
	assert.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "the read lingered ReadLinger first")

	// A linger longer than the ctx: Receive returns with the ctx's error
	// and takes nothing.
	b.opts.ReadLinger = time.Minute
	busy()
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

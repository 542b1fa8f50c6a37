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
	const linger = 5 * time.Millisecond
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
		{name: "busy: 8 or more found, fast, under half the count", readLinger: linger, prevFound: 16, found: 16, asked: 256, window: 300 * time.Microsecond, want: true},
		{name: "quiet: fewer than 8 found", readLinger: linger, prevFound: 7, found: 7, asked: 256, window: 10 * time.Microsecond},
		{name: "moderately busy: 20 a millisecond", readLinger: linger, prevFound: 1, found: 15, asked: 256, window: 800 * time.Microsecond},
		{name: "just at the rate", readLinger: linger, prevFound: 25, found: 25, asked: 256, window: time.Millisecond, want: true},
		{name: "a backlog: half the count or more", readLinger: linger, prevFound: 128, found: 128, asked: 256, window: 100 * time.Microsecond},
		{name: "turned off", readLinger: -1, prevFound: 16, found: 16, asked: 256, window: 100 * time.Microsecond},
		{name: "first read: no rate yet", readLinger: linger, found: 16, asked: 256, first: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := start.Add(tt.window)
			s := &subscription{
				b:     &Backend{opts: Options{ReadLinger: tt.readLinger}},
				found: tt.found, asked: tt.asked, prevFound: tt.prevFound, prevStarted: start,
				lingerClock: func() time.Time { return now },
			}
			var waited []time.Duration
			s.lingerWait = func(_ context.Context, d time.Duration) error {
				waited = append(waited, d)
				return nil
			}
			if tt.first {
				s.prevStarted = time.Time{}
			}
			at, err := s.lingerBeforeRead(context.Background())
			require.NoError(t, err)
			assert.Equal(t, now, at, "the read starts at the clock's time")
			if tt.want {
				assert.Equal(t, []time.Duration{linger}, waited, "the read lingers ReadLinger")
			} else {
				assert.Empty(t, waited, "the read does not linger")
			}
		})
	}
}

// TestReadLingerFollowsReceiveAndEndsWithCtx drives the decision through
// Receive against a server: what each read found and when it started
// reach the next decision, and a linger whose ctx ends returns the ctx's
// error and reads nothing.
func TestReadLingerFollowsReceiveAndEndsWithCtx(t *testing.T) {
	defer time.AfterFunc(time.Minute, func() { panic("watchdog: " + t.Name() + " still running after 1m") }).Stop()
	ctx := context.Background()
	c := redis.NewClient(redistest.Options(t))
	defer c.Close()
	const linger = 5 * time.Millisecond
	b, err := New(c, &Options{Prefix: fmt.Sprintf("linger%d", time.Now().UnixNano()), ReadLinger: linger})
	require.NoError(t, err)
	defer b.Close()
	bsub, err := b.Subscribe(ctx, "t", backend.SubscribeConfig{Group: "g", AckTimeout: 30 * time.Second, MaxInFlight: 100, MaxDeliveries: 3, Observer: observer.Nop()})
	require.NoError(t, err)
	defer bsub.Close()
	sub := bsub.(*subscription)
	now := time.Unix(1_700_000_000, 0)
	sub.lingerClock = func() time.Time { return now }
	var waited []time.Duration
	sub.lingerWait = func(_ context.Context, d time.Duration) error {
		waited = append(waited, d)
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

	publish(10)
	receive(10)
	now = now.Add(100 * time.Microsecond)
	publish(10)
	receive(10) // the read before found nothing yet: no rate
	assert.Empty(t, waited)
	now = now.Add(100 * time.Microsecond)
	publish(3)
	receive(3) // 20 found in 200µs: busy
	assert.Equal(t, []time.Duration{linger}, waited, "a read after two busy ones lingers")
	now = now.Add(100 * time.Microsecond)
	publish(10)
	receive(10) // the last found 3: quiet
	assert.Len(t, waited, 1, "a read after a quiet one does not linger")
	now = now.Add(100 * time.Microsecond)
	publish(10)
	receive(10) // 13 found in 200µs: busy
	require.Len(t, waited, 2)

	// A real linger, longer than the ctx: Receive returns with the ctx's
	// error and takes nothing.
	sub.lingerWait = nil
	b.opts.ReadLinger = time.Minute
	now = now.Add(100 * time.Microsecond)
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

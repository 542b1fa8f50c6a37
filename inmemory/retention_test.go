package inmemory_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

var retentionSeq atomic.Int64

// backendMsgs returns n messages published at at.
func backendMsgs(n int, at time.Time) []*backend.Message {
	msgs := make([]*backend.Message, n)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: fmt.Sprintf("r-%d", retentionSeq.Add(1)), IDGenerated: true, Payload: make([]byte, 200), PublishedAt: at}
	}
	return msgs
}

func TestBoundRetentionCapsATopicWithNoGroup(t *testing.T) {
	ctx := context.Background()
	be := newBackend(t, nil)
	const bound = 300
	require.NoError(t, be.BoundRetention(ctx, "len", backend.RetentionBound{MaxLen: bound}))
	for range 30 {
		require.NoError(t, be.Publish(ctx, "len", backendMsgs(100, time.Now())))
		st, _ := be.Stats("len")
		require.LessOrEqual(t, st.Window, bound, "the topic stays within its bound after each publish")
	}
	st, _ := be.Stats("len")
	t.Logf("3000 published to a topic bounded at %d: %d entries (%d bytes) kept", bound, st.Window, st.BacklogBytes)
	assert.Equal(t, bound, st.Window, "the newest entries are kept")

	require.NoError(t, be.BoundRetention(ctx, "age", backend.RetentionBound{MaxAge: time.Minute}))
	require.NoError(t, be.Publish(ctx, "age", backendMsgs(100, time.Now().Add(-time.Hour))))
	require.NoError(t, be.Publish(ctx, "age", backendMsgs(1, time.Now())))
	st, _ = be.Stats("age")
	assert.Equal(t, 1, st.Window, "a publish drops the entries past the age bound")
}

func TestCloseLeavesNothingSettledBehind(t *testing.T) {
	ctx := context.Background()
	be := newBackend(t, nil)
	b := bus.New(be)
	defer b.Close(ctx)
	const n = 400
	var handled atomic.Int64
	sub, err := b.Subscribe(ctx, "settled", func(context.Context, *bus.Delivery) error { handled.Add(1); return nil })
	require.NoError(t, err)
	for range n / 100 {
		require.NoError(t, be.Publish(ctx, "settled", backendMsgs(100, time.Now())))
	}
	require.Eventually(t, func() bool { return handled.Load() == n }, 10*time.Second, time.Millisecond, "every message handled")
	require.NoError(t, sub.Close(ctx))
	st, _ := be.Stats("settled")
	assert.Zero(t, st.Backlog, "nothing settled stays after the consumer closed")
}

func TestEventsTopicStaysWithinItsBound(t *testing.T) {
	ctx := context.Background()
	be := newBackend(t, nil)
	const bound, n = 20, 2000
	b := bus.New(be, bus.WithEvents("events"), bus.WithEventsRetention(time.Hour, bound))
	defer b.Close(ctx)
	var handled atomic.Int64
	_, err := b.Subscribe(ctx, "work", func(context.Context, *bus.Delivery) error { handled.Add(1); return nil })
	require.NoError(t, err)
	for i := range n / 50 {
		msgs := make([]*bus.Message, 50)
		for j := range msgs {
			msgs[j] = &bus.Message{Payload: []byte("x")}
		}
		require.NoError(t, b.Publish(ctx, "work", msgs...))
		require.Eventually(t, func() bool { return handled.Load() == int64(50*(i+1)) }, 10*time.Second, time.Millisecond)
	}
	require.Eventually(t, func() bool { st, _ := be.Stats("events"); return st.Published > 0 }, 10*time.Second, time.Millisecond, "events are written")
	st, _ := be.Stats("events")
	t.Logf("events topic bounded at %d messages after %d deliveries: %d of %d kept (%d bytes)", bound, n, st.Window, st.Published, st.BacklogBytes)
	assert.LessOrEqual(t, st.Window, bound, "the events topic stays within its bound")
}

package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/observer"
)

// boundRecorder is an in-memory backend that records the retention
// bounds the bus sets.
type boundRecorder struct {
	*inmemory.Backend
	mu     sync.Mutex
	bounds map[string]backend.RetentionBound
}

func (r *boundRecorder) BoundRetention(ctx context.Context, topic string, b backend.RetentionBound) error {
	r.mu.Lock()
	r.bounds[topic] = b
	r.mu.Unlock()
	return r.Backend.BoundRetention(ctx, topic, b)
}

func (r *boundRecorder) snapshot() map[string]backend.RetentionBound {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]backend.RetentionBound{}
	for k, v := range r.bounds {
		out[k] = v
	}
	return out
}

// boundEvents runs a bus with events on over a boundRecorder, handles
// one message and returns the bounds the bus set once its events are
// written.
func boundEvents(t *testing.T, partitions int, opts ...bus.Option) map[string]backend.RetentionBound {
	t.Helper()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	rec := &boundRecorder{Backend: be, bounds: map[string]backend.RetentionBound{}}
	b := bus.New(rec, append([]bus.Option{bus.WithEvents(eventsTopic), bus.WithObserver(observer.Nop())}, opts...)...)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, b.Close(ctx))
	}()
	ctx := context.Background()
	if partitions > 1 {
		require.NoError(t, b.CreateTopic(ctx, eventsTopic, partitions))
	}
	_, err = b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error { return nil })
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1"}))
	waitKinds(t, be, "o-1", lifecycle.Received, lifecycle.Succeeded)
	return rec.snapshot()
}

func TestEventsTopicGetsTheDefaultRetentionBound(t *testing.T) {
	got := boundEvents(t, 1)
	assert.Equal(t, map[string]backend.RetentionBound{eventsTopic: {MaxAge: 24 * time.Hour, MaxLen: 100_000}}, got,
		"the events topic is bounded at DefaultEventsMaxAge and DefaultEventsMaxLen before its first events")
	assert.Equal(t, 24*time.Hour, bus.DefaultEventsMaxAge)
	assert.Equal(t, 100_000, bus.DefaultEventsMaxLen)
}

func TestWithEventsRetentionSetsTheBound(t *testing.T) {
	got := boundEvents(t, 1, bus.WithEventsRetention(time.Minute, 10))
	assert.Equal(t, map[string]backend.RetentionBound{eventsTopic: {MaxAge: time.Minute, MaxLen: 10}}, got)
}

func TestWithEventsRetentionZeroLeavesTheTopicUnbounded(t *testing.T) {
	got := boundEvents(t, 1, bus.WithEventsRetention(0, 0))
	assert.Empty(t, got, "no bound is set when both caps are off")
}

func TestPartitionedEventsTopicIsBoundedPartitionByPartition(t *testing.T) {
	got := boundEvents(t, 4, bus.WithEventsRetention(time.Minute, 10))
	want := map[string]backend.RetentionBound{}
	for p := range 4 {
		want[backend.PartitionTopic(eventsTopic, p)] = backend.RetentionBound{MaxAge: time.Minute, MaxLen: 3}
	}
	assert.Equal(t, want, got, "each partition holds its share of the length, rounded up")
}

func TestWithEventsRetentionRefusesNegativeBoundsBeforeIO(t *testing.T) {
	tests := []struct {
		name   string
		maxAge time.Duration
		maxLen int
	}{
		{name: "negative age", maxAge: -time.Second, maxLen: 10},
		{name: "negative length", maxAge: time.Hour, maxLen: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be, err := inmemory.New(nil)
			require.NoError(t, err)
			b := bus.New(be, bus.WithEvents(eventsTopic), bus.WithEventsRetention(tt.maxAge, tt.maxLen))
			defer b.Close(context.Background())
			err = b.Publish(context.Background(), "orders", &bus.Message{Payload: []byte("x")})
			require.ErrorIs(t, err, bus.ErrInvalidOption, "a negative bound makes the bus refuse calls")
			assert.Contains(t, err.Error(), "events retention", "the error names the option")
		})
	}
}

// trimRecorder is an in-memory backend that records the topics the bus
// asks it to trim.
type trimRecorder struct {
	*inmemory.Backend
	mu      sync.Mutex
	trimmed []string
}

func (r *trimRecorder) TrimSettled(_ context.Context, topic string) error {
	r.mu.Lock()
	r.trimmed = append(r.trimmed, topic)
	r.mu.Unlock()
	return nil
}

func (r *trimRecorder) topics() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.trimmed...)
}

func TestCleanCloseTrimsWhatEveryGroupSettled(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	rec := &trimRecorder{Backend: be}
	b := bus.New(rec, bus.WithObserver(observer.Nop()))
	ctx := context.Background()
	defer b.Close(ctx)
	handled := make(chan struct{}, 1)
	sub, err := b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error { handled <- struct{}{}; return nil })
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1"}))
	<-handled
	assert.Empty(t, rec.topics(), "nothing trimmed while the subscription runs")
	require.NoError(t, sub.Close(ctx))
	assert.Equal(t, []string{"orders"}, rec.topics(), "a clean Close trims its topic once")
}

func TestForcedCloseDoesNotTrim(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	rec := &trimRecorder{Backend: be}
	b := bus.New(rec, bus.WithObserver(observer.Nop()))
	ctx := context.Background()
	defer b.Close(ctx)
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	sub, err := b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error {
		close(started)
		<-release // ignores its ctx
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "o-1"}))
	<-started
	closeCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.Error(t, sub.Close(closeCtx), "the handler outlives the Close ctx")
	assert.Empty(t, rec.topics(), "a Close whose ctx ended first spends no more time on a trim")
}

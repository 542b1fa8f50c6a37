package bus_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/internal/testkit/autoscaletest"
)

func TestAutoscaleFollowsAGrowingBacklogUpToMaxAndBackToMinOnMem(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	rec := &autoscaletest.Recorder{}
	b := bus.New(be, bus.WithObserver(rec))
	defer func() { require.NoError(t, b.Close(context.Background()), "close the bus") }()
	autoscaletest.Run(t, b, rec, "autoscaled")
}

func TestWithAutoscaleRejectsBadBoundsBeforeAnyIO(t *testing.T) {
	tests := []struct {
		name string
		opts []bus.SubscribeOption
	}{
		{"min below one", []bus.SubscribeOption{bus.WithAutoscale(0, 4)}},
		{"max below min", []bus.SubscribeOption{bus.WithAutoscale(4, 2)}},
		{"max too large", []bus.SubscribeOption{bus.WithAutoscale(1, 1<<20)}},
		{"with max in flight", []bus.SubscribeOption{bus.WithAutoscale(1, 4), bus.WithMaxInFlight(8)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &subscribeCounter{fakeBackend: newFakeBackend()}
			b := bus.New(f)
			defer func() { _ = b.Close(context.Background()) }()
			_, err := b.Subscribe(context.Background(), "t", func(context.Context, *bus.Delivery) error { return nil }, tt.opts...)
			require.ErrorIs(t, err, bus.ErrInvalidOption, "bad autoscale options are refused")
			require.Zero(t, f.subscribes.Load(), "no backend call was made")
		})
	}
}

// subscribeCounter counts Subscribe calls.
type subscribeCounter struct {
	*fakeBackend
	subscribes atomic.Int64
}

func (c *subscribeCounter) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	c.subscribes.Add(1)
	return c.fakeBackend.Subscribe(ctx, topic, cfg)
}

func TestAutoscaleOnAPartitionedTopicFollowsTheGroupsBacklog(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	rec := &autoscaletest.Recorder{}
	b := bus.New(be, bus.WithObserver(rec))
	defer func() { require.NoError(t, b.Close(context.Background()), "close the bus") }()
	require.NoError(t, b.CreateTopic(context.Background(), "autoscaled-parts", 4), "create a topic of 4 partitions")
	autoscaletest.Run(t, b, rec, "autoscaled-parts")
}

func TestAutoscaleWritesAScaledEventPerDecisionWhenEventsAreOn(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	rec := &autoscaletest.Recorder{}
	b := bus.New(be, bus.WithObserver(rec), bus.WithEvents("events"))
	defer func() { require.NoError(t, b.Close(context.Background()), "close the bus") }()
	autoscaletest.Run(t, b, rec, "autoscaled-events")
	decisions := rec.Scales()
	sc := lifecycle.NewScaling("events")
	require.Eventually(t, func() bool {
		_, err := sc.Update(context.Background(), be, 1_000_000)
		require.NoError(t, err, "read the events topic")
		bs := sc.Of("autoscaled-events", "scaled")
		return len(bs) == 1 && bs[0].Bound == 1
	}, 10*time.Second, 10*time.Millisecond, "the events topic holds the member's last decision")
	bs := sc.Of("autoscaled-events", "scaled")
	require.NotEmpty(t, bs[0].Member, "the event names the member")
	require.Equal(t, decisions[len(decisions)-1].Reason, bs[0].Reason, "with the reason of the last decision")
	require.False(t, bs[0].Time.IsZero(), "and its time")
}

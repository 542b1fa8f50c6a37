package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/redistest"
	"github.com/eventbus-go/bus/observer"
)

// A member counts as soon as it subscribed, not from its first delivery:
// on Redis 7.0 a read that finds nothing does not create the consumer.
func TestGroupsCountAMemberThatReceivedNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, redistest.URL(t), bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	defer b.Close(ctx)
	for i := 1; i <= 2; i++ {
		_, err = b.Subscribe(ctx, "idle", func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup("g"))
		require.NoError(t, err)
		gs, err := b.Groups(ctx, "idle")
		require.NoError(t, err)
		require.Len(t, gs, 1)
		assert.EqualValues(t, i, gs[0].Consumers, "%d idle member(s) count at once", i)
	}
}

package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

func TestCreateGroupOnAPartitionedTopicKeepsEveryPartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, "mem://")
	require.NoError(t, err)
	require.NoError(t, b.CreateTopic(ctx, "orders", 4))
	require.NoError(t, b.CreateGroup(ctx, "orders", "billing"))
	var msgs []*bus.Message
	for i := range 16 {
		msgs = append(msgs, &bus.Message{Key: string(rune('a' + i)), Payload: []byte{byte(i)}})
	}
	require.NoError(t, b.Publish(ctx, "orders", msgs...))
	seen := make(chan byte, len(msgs))
	sub, err := b.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
		seen <- d.Payload[0]
		return nil
	}, bus.WithGroup("billing"))
	require.NoError(t, err)
	got := map[byte]bool{}
	for len(got) < len(msgs) {
		select {
		case p := <-seen:
			got[p] = true
		case <-ctx.Done():
			t.Fatalf("got %d of %d messages published before the first member", len(got), len(msgs))
		}
	}
	require.NoError(t, sub.Close(ctx))
	require.NoError(t, b.Close(ctx))
	require.ErrorIs(t, b.CreateGroup(ctx, "orders", "billing"), bus.ErrClosed, "after Close")
}

func TestCreateGroupRefusesBadNamesBeforeIO(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	require.NoError(t, err)
	defer b.Close(ctx)
	require.ErrorIs(t, b.CreateGroup(ctx, "bad topic", "g"), bus.ErrInvalidTopic)
	require.ErrorIs(t, b.CreateGroup(ctx, "t", ""), bus.ErrInvalidOption)
	done, stop := context.WithCancel(ctx)
	stop()
	require.ErrorIs(t, b.CreateGroup(done, "t", "g"), context.Canceled, "an ended ctx")
}

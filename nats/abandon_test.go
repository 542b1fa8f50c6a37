package nats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// TestReceiveCutShortGivesBackWhatItsRequestDelivers: a Receive whose
// ctx ends has sent a pull request the server may already be filling.
// What it delivers goes back to the group at once, uncounted, so the next
// member gets it first (before the messages after it) instead of an
// AckWait later: the member that closes is not there to read it. The
// rounds make the server's race with the cancellation come out both ways.
func TestReceiveCutShortGivesBackWhatItsRequestDelivers(t *testing.T) {
	url := natstest.Start(t).URL()
	o := isolated(t, url, busnats.Options{})
	be := connect(t, url, o)
	defer be.Close()
	js, err := jetstream.New(be.Conn())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := backend.SubscribeConfig{Group: "g", AckTimeout: time.Minute, MaxInFlight: 8, StartFrom: backend.StartOldest}
	for round := range 20 {
		topic := fmt.Sprint("cut", round)
		first, err := be.Subscribe(ctx, topic, cfg)
		require.NoError(t, err)
		var want []string
		for i := range 4 {
			id := fmt.Sprint("m", i)
			want = append(want, id)
			require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: id, Payload: []byte("x")}}))
		}
		cut, cutNow := context.WithCancel(ctx)
		cutNow()
		got, err := first.Receive(cut, 4)
		require.ErrorIs(t, err, context.Canceled, "round %d", round)
		require.Empty(t, got)
		// The member is still open, as a closing member is while it
		// drains: the server has served or dropped the request.
		require.Eventually(t, func() bool {
			c, err := js.Consumer(ctx, o.StreamPrefix+"_"+topic, "g")
			require.NoError(t, err)
			return c.CachedInfo().NumWaiting == 0
		}, 5*time.Second, time.Millisecond, "round %d: the cut request is no longer open", round)
		require.NoError(t, first.Close())

		second, err := be.Subscribe(ctx, topic, cfg)
		require.NoError(t, err)
		var ids []string
		require.Eventually(t, func() bool {
			ms, err := second.Receive(ctx, 4-len(ids))
			require.NoError(t, err)
			for _, m := range ms {
				ids = append(ids, m.ID)
				assert.Equal(t, 1, m.Attempt, "round %d: given back without counting an attempt", round)
			}
			return len(ids) == 4
		}, 5*time.Second, time.Millisecond, "round %d: the next member gets every message within seconds, not after the AckWait", round)
		assert.Equal(t, want, ids, "round %d: in order", round)
		require.NoError(t, second.Close())
	}
}

package nats_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// TestReceiveCutShortReturnsWhatItsRequestDelivers: a Receive whose ctx
// ends has sent a pull request the server may already be filling. What it
// delivers comes back from that Receive with the ctx's error, for the bus
// to handle or give back, instead of staying in an inbox nobody reads
// until its AckWait; the next member then gets the rest, in order. The
// rounds make the server's race with the cancellation come out both ways.
func TestReceiveCutShortReturnsWhatItsRequestDelivers(t *testing.T) {
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
		var ids []string
		for _, m := range got {
			ids = append(ids, m.ID)
			require.NoError(t, first.Ack(ctx, []backend.AckID{m.AckID}), "the member handles what it received")
		}
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
		require.Eventually(t, func() bool {
			if len(ids) == 4 {
				return true
			}
			ms, err := second.Receive(ctx, 4-len(ids))
			require.NoError(t, err)
			for _, m := range ms {
				ids = append(ids, m.ID)
				assert.Equal(t, 1, m.Attempt, "round %d: delivered once", round)
			}
			return len(ids) == 4
		}, 5*time.Second, time.Millisecond, "round %d: the next member gets the rest within seconds, not after the AckWait", round)
		assert.Equal(t, want, ids, "round %d: in order", round)
		require.NoError(t, second.Close())
	}
}

// TestUnlockLetsTheLockLapseWhenAPullMayStillBeAnswered: a member that
// gave up on a pull request while it waited for messages (the bus closing
// it) moves to a fresh inbox. A lone server delivers nothing more to the
// old one once it has the unsubscribe, so the member releases its group
// lock. In a cluster the consumer's leader, on another server, may still
// deliver to it until the unsubscribe reaches it, and that delivery stays
// pending until its AckWait: UnlockGroup then lets the lock lapse, so
// that the next holder takes it over and waits for it.
func TestUnlockLetsTheLockLapseWhenAPullMayStillBeAnswered(t *testing.T) {
	tests := []struct {
		name     string
		url      func(t *testing.T) string
		takeover bool
	}{
		{name: "one server", url: func(t *testing.T) string { return natstest.Start(t).URL() }, takeover: false},
		{name: "cluster", url: func(t *testing.T) string { return natstest.StartCluster(t, 3).URL() }, takeover: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := tt.url(t)
			be := connect(t, url, isolated(t, url, busnats.Options{}))
			defer be.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := backend.SubscribeConfig{Group: "g", AckTimeout: time.Minute, MaxInFlight: 8, StartFrom: backend.StartOldest}
			// The locks' bucket is made by the first LockGroup; in a
			// cluster its stream may not be found until it has a
			// leader, and the bus asks again next round, as this does.
			require.Eventually(t, func() bool {
				held, _, err := be.LockGroup(ctx, "unlock", "g", "leaving", time.Minute)
				return err == nil && held
			}, 10*time.Second, 10*time.Millisecond, "the leaving member takes the lock")
			sub, err := be.Subscribe(ctx, "unlock", cfg)
			require.NoError(t, err)
			// The topic is empty: the server holds the request for its
			// first message, longer than the Receive waits. A consumer
			// just made in a cluster answers "no responders" until it
			// has a leader; the Receive is made again then.
			require.Eventually(t, func() bool {
				cut, stop := context.WithTimeout(ctx, 20*time.Millisecond)
				defer stop()
				_, err := sub.Receive(cut, 4)
				return errors.Is(err, context.DeadlineExceeded)
			}, 10*time.Second, 10*time.Millisecond, "a Receive gives up on a request the server holds")
			require.NoError(t, sub.Close())
			require.NoError(t, be.UnlockGroup(ctx, "unlock", "g", "leaving"))
			held, takeover, err := be.LockGroup(ctx, "unlock", "g", "next", time.Minute)
			require.NoError(t, err)
			require.True(t, held, "the leaving member's lock is free")
			assert.Equal(t, tt.takeover, takeover, "the next holder takes it over")
		})
	}
}

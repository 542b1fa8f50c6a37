package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// A release is recorded at the broker: another member, of another
// Backend, sees the released message again with the released delivery's
// Attempt, and the record goes when the message is acked.
func TestReleaseIsSeenByAnotherMemberWithTheSameAttempt(t *testing.T) {
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{})
	ctx := context.Background()
	first := connect(t, srv.URL(), o)
	defer first.Close()
	require.NoError(t, first.Publish(ctx, "rel.t", []*backend.Message{{ID: "m", Payload: []byte("x")}}))

	be := first
	for round := 1; round <= 3; round++ {
		sub, err := be.Subscribe(ctx, "rel.t", subCfg(backend.StartOldest, 1))
		require.NoError(t, err, "round %d: subscribe", round)
		m := receiveN(t, sub, 1)[0]
		assert.Equal(t, 1, m.Attempt, "round %d: the releases before did not count", round)
		rel, ok := sub.(backend.Releaser)
		require.True(t, ok, "JetStream subscriptions implement backend.Releaser")
		require.NoError(t, rel.Release(ctx, m.AckID), "round %d: release", round)
		require.NoError(t, sub.Close(), "round %d: close the releasing member", round)
		if round > 1 {
			require.NoError(t, be.Close(), "round %d: close the releasing backend", round)
		}
		be = connect(t, srv.URL(), o) // the next member runs in another Backend
	}
	defer be.Close()
	sub, err := be.Subscribe(ctx, "rel.t", subCfg(backend.StartOldest, 1))
	require.NoError(t, err)
	defer sub.Close()
	m := receiveN(t, sub, 1)[0]
	assert.Equal(t, 1, m.Attempt, "three releases, then a delivery with Attempt 1")
	require.NoError(t, sub.Ack(ctx, []backend.AckID{m.AckID}), "ack")
}

func TestReleaseOfAnExpiredLeaseIsStale(t *testing.T) {
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{})
	ctx := context.Background()
	be := connect(t, srv.URL(), o)
	defer be.Close()
	require.NoError(t, be.Publish(ctx, "rel.stale", []*backend.Message{{ID: "m", Payload: []byte("x")}}))
	cfg := subCfg(backend.StartOldest, 1)
	cfg.AckTimeout = 300 * time.Millisecond
	sub, err := be.Subscribe(ctx, "rel.stale", cfg)
	require.NoError(t, err)
	defer sub.Close()
	old := receiveN(t, sub, 1)[0]
	again := receiveN(t, sub, 1)[0] // after the lease ran out
	assert.Equal(t, 2, again.Attempt, "redelivered after the lease")
	err = sub.(backend.Releaser).Release(ctx, old.AckID)
	require.ErrorIs(t, err, backend.ErrStale, "the expired delivery is stale")
	require.NoError(t, sub.Ack(ctx, []backend.AckID{again.AckID}), "ack the newer delivery")
}

// A group's lease is its longest member's: a member that asks for a
// shorter ack timeout does not shorten the others' (the issue of mixed ack
// timeouts), one that asks for a longer one lengthens it.
func TestMixedAckTimeoutsKeepTheLongestLease(t *testing.T) {
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{})
	ctx := context.Background()
	be := connect(t, srv.URL(), o)
	defer be.Close()
	ackWait := func() time.Duration {
		js, err := jetstream.New(be.Conn())
		require.NoError(t, err)
		cons, err := js.Consumer(ctx, o.StreamPrefix+"_mixed", "g")
		require.NoError(t, err)
		info, err := cons.Info(ctx)
		require.NoError(t, err)
		return info.Config.AckWait
	}
	for _, tt := range []struct{ ask, want time.Duration }{
		{20 * time.Second, 20 * time.Second},
		{time.Second, 20 * time.Second},
		{30 * time.Second, 30 * time.Second},
	} {
		cfg := subCfg(backend.StartNewest, 1)
		cfg.AckTimeout = tt.ask
		sub, err := be.Subscribe(ctx, "mixed", cfg)
		require.NoError(t, err)
		defer sub.Close()
		assert.Equal(t, tt.want, ackWait(), "a member asking for %v leaves the group's lease at %v", tt.ask, tt.want)
	}
}

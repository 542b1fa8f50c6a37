package nats_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// A whole batch given back twice (as early deliveries are) comes back
// each time with Attempt 1: every release is recorded, the second on top
// of the first, and taken off when the batch's redeliveries are looked up
// together; acking the batch deletes every record.
func TestDelayedBatchGivenBackTwiceComesBackWithAttemptOne(t *testing.T) {
	const n = 64
	srv := natstest.Start(t)
	o := isolated(t, srv.URL(), busnats.Options{})
	ctx := context.Background()
	be := connect(t, srv.URL(), o)
	defer be.Close()
	msgs := make([]*backend.Message, n)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: fmt.Sprintf("m%d", i), Payload: []byte("x")}
	}
	require.NoError(t, be.Publish(ctx, "rel.batch", msgs))
	sub, err := be.Subscribe(ctx, "rel.batch", subCfg(backend.StartOldest, n))
	require.NoError(t, err)
	defer sub.Close()
	sn, ok := sub.(backend.Snoozer)
	require.True(t, ok, "JetStream subscriptions implement backend.Snoozer")

	got := receiveN(t, sub, n)
	for round := 1; round <= 2; round++ {
		for _, m := range got {
			require.NoError(t, sn.Snooze(ctx, m.AckID, 0), "round %d: give %s back", round, m.ID)
		}
		got = receiveN(t, sub, n)
		for _, m := range got {
			assert.Equal(t, 1, m.Attempt, "round %d: %s given back %d times arrives as its first attempt", round, m.ID, round)
		}
	}
	ackIDs := make([]backend.AckID, n)
	for i, m := range got {
		ackIDs[i] = m.AckID
	}
	require.NoError(t, sub.Ack(ctx, ackIDs), "ack the batch")

	js, err := jetstream.New(be.Conn())
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, o.StreamPrefix+"_RELEASED")
	require.NoError(t, err, "the releases were recorded in the backend's bucket")
	keys, err := kv.Keys(ctx)
	if err == nil {
		assert.Empty(t, keys, "acking deletes the release records")
	} else {
		require.ErrorIs(t, err, jetstream.ErrNoKeysFound, "acking deletes the release records")
	}
}

package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/observer"
)

// testDeleteGroup: DeleteGroup removes the group's queue, its lock, its
// lock's state queue and its release notes, and leaves the topic's other
// groups alone; the deleted group's member finds its Receive failing;
// a group that does not exist deletes without an error; bad input is
// refused before any I/O, and a closed backend refuses with ErrClosed.
func testDeleteGroup(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := openRabbit(ctx, t, node.URL())

	const topic = "delgroup"
	cfg := func(g string) backend.SubscribeConfig {
		return backend.SubscribeConfig{Group: g, AckTimeout: 30 * time.Second, MaxInFlight: 4, Observer: observer.Nop()}
	}
	gone, err := b.Subscribe(ctx, topic, cfg("gone"))
	require.NoError(t, err)
	defer gone.Close()
	stays, err := b.Subscribe(ctx, topic, cfg("stays"))
	require.NoError(t, err)
	defer stays.Close()
	held, _, err := b.LockGroup(ctx, topic, "gone", "holder", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	require.NoError(t, b.Publish(ctx, topic, []*backend.Message{{ID: "m1", Payload: []byte("x")}}))
	msgs, err := gone.Receive(ctx, 4)
	require.NoError(t, err)
	require.Len(t, msgs, 1, "the group's member has a delivery in flight")

	conn, err := amqp.Dial(node.URL())
	require.NoError(t, err)
	defer conn.Close()
	exists := func(q string) bool {
		ch, err := conn.Channel()
		require.NoError(t, err)
		_, err = ch.QueueDeclarePassive(q, false, false, false, false, nil)
		if err != nil {
			var ae *amqp.Error
			require.ErrorAs(t, err, &ae)
			if ae.Code == amqp.ResourceLocked {
				return true // another connection's exclusive queue: a lock
			}
			require.Equal(t, amqp.NotFound, ae.Code, "queue %s", q)
			return false
		}
		_ = ch.Close()
		return true
	}
	queues := []string{"bus.q.delgroup/gone", "bus.lock.delgroup/gone", "bus.lockstate.delgroup/gone"}
	for _, q := range queues {
		require.True(t, exists(q), "%s before the delete", q)
	}

	require.NoError(t, b.DeleteGroup(ctx, topic, "gone"))
	for _, q := range queues {
		assert.False(t, exists(q), "%s after the delete", q)
	}
	assert.False(t, exists("bus.notes.delgroup/gone"))
	assert.True(t, exists("bus.q.delgroup/stays"), "the topic's other group stays")
	held, _, err = b.LockGroup(ctx, topic, "gone", "another", time.Minute)
	require.NoError(t, err)
	assert.True(t, held, "the deleted group's lock is free")
	require.NoError(t, b.UnlockGroup(ctx, topic, "gone", "another"))

	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	for {
		_, err := gone.Receive(rctx, 4)
		if err != nil {
			require.NoError(t, rctx.Err(), "the deleted group's member's Receive fails")
			break
		}
	}
	_, err = gone.Receive(rctx, 4)
	require.Error(t, err, "the deleted group's member's next Receive fails too")
	require.NoError(t, rctx.Err(), "the deleted group's member's next Receive fails")
	assert.False(t, exists("bus.q.delgroup/gone"), "the member does not declare its deleted group again")

	require.NoError(t, b.DeleteGroup(ctx, topic, "never-was"), "a group that does not exist")
	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.DeleteGroup(ctx, "bad topic", "g"), backend.ErrInvalidTopic, "checked before anything else")
	assert.ErrorIs(t, b.DeleteGroup(ctx, topic, ""), backend.ErrInvalidOption)
	assert.ErrorIs(t, b.DeleteGroup(ctx, topic, "g"), backend.ErrClosed)
}

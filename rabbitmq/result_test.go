package rabbitmq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
)

// testResultQueues: a result replaces the one stored before (also with
// another ttl); an empty result is found; readers read it again and
// again, at once, within its ttl, and none after; its queue is gone once
// it went unused for its ttl and a second; bad input is refused before
// any I/O, and a closed backend refuses with ErrClosed.
func testResultQueues(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := openRabbit(ctx, t, node.URL())

	const topic = "results"
	require.NoError(t, b.StoreResult(ctx, topic, "m1", []byte("first"), time.Minute))
	require.NoError(t, b.StoreResult(ctx, topic, "m1", []byte("second"), 2*time.Second))
	for range 3 {
		r, found, err := b.Result(ctx, topic, "m1")
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, "second", string(r), "the last result stored, read again and again")
	}
	require.NoError(t, b.StoreResult(ctx, topic, "empty", nil, time.Minute))
	r, found, err := b.Result(ctx, topic, "empty")
	require.NoError(t, err)
	assert.True(t, found, "an empty result is found")
	assert.Empty(t, r)
	_, found, err = b.Result(ctx, topic, "never")
	require.NoError(t, err)
	assert.False(t, found, "a result never stored")

	// Two readers at once: each finds it, looking again while the other
	// holds it, as the bus's Result does.
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for ctx.Err() == nil {
				r, found, err := b.Result(ctx, topic, "m1")
				if err != nil || found {
					if err == nil && string(r) != "second" {
						err = errors.New("read " + string(r))
					}
					errs <- err
					return
				}
			}
			errs <- ctx.Err()
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)

	// Read all along, the result still expires with its ttl (2 s from
	// its store): the nack keeps its expiry.
	gone := time.Now().Add(10 * time.Second)
	for {
		_, found, err := b.Result(ctx, topic, "m1")
		require.NoError(t, err)
		if !found {
			break
		}
		require.True(t, time.Now().Before(gone), "the result is still there 10 s after a 2 s ttl")
		time.Sleep(50 * time.Millisecond)
	}

	// Unread, the queue goes a second after the ttl. A look renews its
	// lease as a read does: the looks are 3 s apart.
	require.NoError(t, b.StoreResult(ctx, topic, "m2", []byte("r"), time.Second))
	conn, err := amqp.Dial(node.URL())
	require.NoError(t, err)
	defer conn.Close()
	require.Eventually(t, func() bool {
		ch, err := conn.Channel()
		if err != nil {
			return false
		}
		_, err = ch.QueueDeclarePassive("bus.result.results/m2", true, false, false, false, nil)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return true
		}
		_ = ch.Close()
		return false
	}, 20*time.Second, 3*time.Second, "the result's queue is deleted once unused past its ttl")

	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.StoreResult(ctx, "bad topic", "m", nil, time.Second), backend.ErrInvalidTopic, "checked before anything else")
	_, _, err = b.Result(ctx, topic, "")
	assert.ErrorIs(t, err, backend.ErrInvalidMessage)
	_, _, err = b.Result(ctx, topic, "m1")
	assert.ErrorIs(t, err, backend.ErrClosed)
	assert.ErrorIs(t, b.StoreResult(ctx, topic, "m1", nil, time.Second), backend.ErrClosed)
}

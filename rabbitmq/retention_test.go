package rabbitmq_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testEventsTopicBoundedByAge: a group on the lifecycle events topic
// that stops consuming keeps no event older than WithEventsRetention's
// age, with no subscriber running: the events expire in its queue.
func testEventsTopicBoundedByAge(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const maxAge = 2 * time.Second
	events := fmt.Sprintf("events.bounded.%d", time.Now().UnixNano())
	b, err := bus.Open(ctx, node.URL(), bus.WithEvents(events), bus.WithEventsRetention(maxAge, 100), bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	defer b.Close(context.Background())

	// A group on the events topic that stops consuming: its queue stays.
	reader, err := bus.Open(ctx, node.URL(), bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	rsub, err := reader.Subscribe(ctx, events, func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup("audit"))
	require.NoError(t, err)
	require.NoError(t, rsub.Close(ctx))
	require.NoError(t, reader.Close(ctx))

	conn, err := amqp.Dial(node.URL())
	require.NoError(t, err)
	defer conn.Close()
	depth := func() int {
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		q, err := ch.QueueDeclarePassive("bus.q."+events+"/audit", true, false, false, false, nil)
		require.NoError(t, err)
		assert.Zero(t, q.Consumers, "no subscriber runs on the events topic")
		return q.Messages
	}

	work := fmt.Sprintf("events.work.%d", time.Now().UnixNano())
	handled := make(chan struct{}, 64)
	wsub, err := b.Subscribe(ctx, work, func(context.Context, *bus.Delivery) error {
		handled <- struct{}{}
		return nil
	}, bus.WithGroup("w"))
	require.NoError(t, err)
	for i := range 20 {
		require.NoError(t, b.Publish(ctx, work, &bus.Message{ID: fmt.Sprintf("w-%d", i), Payload: []byte("x")}))
		select {
		case <-handled:
		case <-ctx.Done():
			t.Fatal("a message was not handled")
		}
	}
	require.NoError(t, wsub.Close(ctx))
	// The bus sends events in batches, a moment after they happen.
	require.Eventually(t, func() bool { return depth() > 0 }, 30*time.Second, 20*time.Millisecond, "the handled messages made events")
	last := time.Now()
	for depth() > 0 {
		require.Less(t, time.Since(last), maxAge+15*time.Second, "the events are gone within the bound and a margin")
		time.Sleep(20 * time.Millisecond) // polling the queue's depth
	}
	t.Logf("the audit group's queue emptied %v after the last event was seen in it (bound %v)", time.Since(last).Round(10*time.Millisecond), maxAge)

	// A bad topic or a negative age is refused before any I/O.
	u, err := url.Parse(node.URL())
	require.NoError(t, err)
	be, err := rabbitmq.OpenURL(ctx, u)
	require.NoError(t, err)
	defer be.Close()
	require.ErrorIs(t, be.BoundRetention(ctx, "", backend.RetentionBound{MaxAge: time.Second}), backend.ErrInvalidTopic)
	require.ErrorIs(t, be.BoundRetention(ctx, "t", backend.RetentionBound{MaxAge: -time.Second}), backend.ErrInvalidOption)
}

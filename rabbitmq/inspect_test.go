package rabbitmq_test

import (
	"context"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testInspect checks the management API figures: a topic with two groups,
// one holding 3 of 10 messages unsettled and one that received nothing,
// shows lag 7 and pending 3, and lag 10 and pending 0; the topic holds
// 10 and took 10. Peek and Delete are unsupported, and without the
// management parameter every call says how to turn inspection on.
func testInspect(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	open := func(raw string) *rabbitmq.Backend {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		b, err := rabbitmq.OpenURL(ctx, u)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b := open(node.InspectURL())
	cfg := backend.SubscribeConfig{AckTimeout: time.Minute, MaxInFlight: 3, Observer: observer.Nop()}
	cfg.Group = "busy"
	busy, err := b.Subscribe(ctx, "inspected", cfg)
	require.NoError(t, err)
	defer busy.Close()
	cfg.Group = "idle"
	idle, err := b.Subscribe(ctx, "inspected", cfg)
	require.NoError(t, err)
	require.NoError(t, idle.Close())
	// Receive opens the consumer; the queues exist once Subscribe returned.
	msgs := make([]*backend.Message, 10)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: "m-" + string(rune('a'+i)), Payload: []byte("x"), PublishedAt: time.Now()}
	}
	require.NoError(t, b.Publish(ctx, "inspected", msgs))
	held := 0
	for held < 3 {
		got, err := busy.Receive(ctx, 3-held)
		require.NoError(t, err)
		held += len(got)
	}

	var gs []backend.GroupInfo
	require.Eventually(t, func() bool {
		gs, err = b.Groups(ctx, "inspected")
		// The management API reports each figure once its statistics
		// have come in.
		return err == nil && len(gs) == 2 && gs[0].Lag == 7 && gs[0].Pending == 3 && gs[0].Consumers == 1 &&
			gs[1].Lag == 10 && gs[1].Pending == 0 && gs[1].Consumers == 0
	}, 30*time.Second, 100*time.Millisecond, "the management API's figures: %+v, %v", gs, err)
	assert.Equal(t, "busy", gs[0].Name)
	assert.Equal(t, backend.Figure(1), gs[0].Consumers)
	assert.Equal(t, "idle", gs[1].Name)
	assert.Equal(t, backend.Figure(0), gs[1].Pending)
	assert.Equal(t, backend.Figure(0), gs[1].Consumers)

	var ti backend.TopicInfo
	require.Eventually(t, func() bool {
		ts, err := b.Topics(ctx)
		if err != nil {
			return false
		}
		for _, x := range ts {
			if x.Name == "inspected" {
				ti = x
				return x.Published == 10 && x.Messages == 10
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "the topic is listed with its publishes")
	assert.Equal(t, backend.Figure(10), ti.Messages, "the group queue that holds the most")
	assert.False(t, ti.Scheduled.Known())

	// Through the bus (and the bus command): no topic is marked as
	// holding dead letters, since none can be peeked at.
	bb, err := bus.Open(ctx, node.InspectURL(), bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	defer bb.Close(context.Background())
	bts, err := bb.Topics(ctx)
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(bts, func(x bus.TopicInfo) bool { return x.Name == "inspected" && !x.DeadLetters }), "%+v", bts)
	bgs, err := bb.Groups(ctx, "inspected")
	require.NoError(t, err)
	assert.Len(t, bgs, 2)

	gs, err = b.Groups(ctx, "never.made")
	require.NoError(t, err)
	assert.Empty(t, gs, "an unknown topic has no groups")
	_, _, err = b.Peek(ctx, "inspected", "", 10)
	require.ErrorIs(t, err, backend.ErrUnsupported)
	_, err = b.Delete(ctx, "inspected", []string{"m-a"})
	require.ErrorIs(t, err, backend.ErrUnsupported)

	plain := open(node.URL())
	_, err = plain.Topics(ctx)
	require.ErrorIs(t, err, backend.ErrUnsupported)
	assert.Contains(t, err.Error(), "management")
	_, err = plain.Groups(ctx, "inspected")
	require.ErrorIs(t, err, backend.ErrUnsupported)

	// A bad management URL is refused before any I/O.
	for _, bad := range []string{"ftp://h:1", "http://", "127.0.0.1:15672", "http://h:1/?x=1"} {
		_, err := rabbitmq.New(ctx, "amqp://127.0.0.1:1/", &rabbitmq.Options{Management: bad})
		require.ErrorIs(t, err, backend.ErrInvalidOption, bad)
	}
}

package rabbitmq_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testClosedChannelReturnsToTheHead checks the broker fact the
// key-ordered give-back stands on: a quorum queue puts the unsettled
// messages of a closed channel (those the consumer received and those
// the broker pushed after an ack freed room) back at its head, in
// delivery order, and counts one delivery each in x-delivery-count.
func testClosedChannelReturnsToTheHead(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := amqp.Dial(node.URL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	const q = "test.head"
	_, err = ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	for i := range 12 {
		c, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp.Publishing{Body: []byte(strconv.Itoa(i))})
		require.NoError(t, err)
		ok, err := c.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok, "message %d confirmed", i)
	}

	first, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, first.Qos(6, 0, false))
	dels, err := first.Consume(q, "first", false, false, false, false, nil)
	require.NoError(t, err)
	next := func(dels <-chan amqp.Delivery) amqp.Delivery {
		t.Helper()
		select {
		case d := <-dels:
			return d
		case <-ctx.Done():
			t.Fatal("no delivery")
			return amqp.Delivery{}
		}
	}
	var tags []uint64
	for i := range 6 {
		d := next(dels)
		require.Equal(t, strconv.Itoa(i), string(d.Body), "first deliveries in publish order")
		tags = append(tags, d.DeliveryTag)
	}
	require.NoError(t, first.Ack(tags[1], true), "ack 0 and 1: the broker pushes 6 and 7")
	for i := 6; i < 8; i++ {
		require.Equal(t, strconv.Itoa(i), string(next(dels).Body))
	}
	require.NoError(t, first.Close(), "close the channel with 2..7 unsettled")

	second, err := conn.Channel()
	require.NoError(t, err)
	defer second.Close()
	again, err := second.Consume(q, "second", true, false, false, false, nil)
	require.NoError(t, err)
	var got []string
	for range 10 {
		d := next(again)
		got = append(got, fmt.Sprintf("%s:%v", d.Body, d.Headers["x-delivery-count"]))
	}
	assert.Equal(t, []string{"2:1", "3:1", "4:1", "5:1", "6:1", "7:1", "8:<nil>", "9:<nil>", "10:<nil>", "11:<nil>"}, got,
		"the unsettled messages back at the head, in delivery order, counted once")
}

// testKeyOrderedCloseKeepsAttempts: a member that fetches under the
// group lock and closes with messages received and unsettled, one
// released, and more pushed to it, gives them back to the head of the
// queue; the next holder, on another connection, receives them first, in
// publish order, the released and pushed ones on their first attempt and
// the unsettled one (its handler may have run) on its second.
func testKeyOrderedCloseKeepsAttempts(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, err := url.Parse(node.URL())
	require.NoError(t, err)
	open := func() *rabbitmq.Backend {
		b, err := rabbitmq.OpenURL(ctx, u)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	b1, b2 := open(), open()
	const topic, group, n = "keyorder.close", "g", 20
	cfg := backend.SubscribeConfig{Group: group, AckTimeout: time.Minute, MaxInFlight: 8, Observer: observer.Nop()}
	held, _, err := b1.LockGroup(ctx, topic, group, "one", 30*time.Second)
	require.NoError(t, err)
	require.True(t, held, "the first member takes the lock")
	s1, err := b1.Subscribe(ctx, topic, cfg)
	require.NoError(t, err)
	msgs := make([]*backend.Message, n)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: fmt.Sprintf("m%02d", i), Key: "k", Payload: []byte(strconv.Itoa(i)), PublishedAt: time.Now()}
	}
	require.NoError(t, b1.Publish(ctx, topic, msgs))

	var got []*backend.Message
	for len(got) < 4 {
		ms, err := s1.Receive(ctx, 4-len(got))
		require.NoError(t, err)
		got = append(got, ms...)
	}
	require.NoError(t, s1.Ack(ctx, []backend.AckID{got[0].AckID, got[1].AckID}), "ack m00 and m01")
	require.NoError(t, s1.(backend.Releaser).Release(ctx, got[3].AckID), "release m03")
	require.NoError(t, s1.Close(), "m02 unsettled, m03 released, the rest pushed or queued")
	require.NoError(t, b1.UnlockGroup(ctx, topic, group, "one"))

	held, takeover, err := b2.LockGroup(ctx, topic, group, "two", 30*time.Second)
	require.NoError(t, err)
	require.True(t, held, "the next member takes the released lock")
	assert.False(t, takeover, "a released lock is no takeover")
	s2, err := b2.Subscribe(ctx, topic, cfg)
	require.NoError(t, err)
	defer s2.Close()
	var again []string
	for len(again) < n-2 {
		ms, err := s2.Receive(ctx, n)
		require.NoError(t, err)
		ids := make([]backend.AckID, 0, len(ms))
		for _, m := range ms {
			again = append(again, fmt.Sprintf("%s:%d", m.ID, m.Attempt))
			ids = append(ids, m.AckID)
		}
		require.NoError(t, s2.Ack(ctx, ids))
	}
	want := []string{"m02:2"}
	for i := 3; i < n; i++ {
		want = append(want, fmt.Sprintf("m%02d:1", i))
	}
	assert.Equal(t, want, again, "the next holder gets what the first gave back first, in publish order, counting only the unsettled one")
}

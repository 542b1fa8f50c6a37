package rabbitmq_test

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"sync"
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

// testMalformedEntryDeadLettered publishes, with a plain AMQP client, a
// message without bus-at to a topic's exchange: the subscription never
// hands it to the handler, reports it as a decode error and puts a copy
// on its dead-letter topic, coded malformed.
func testMalformedEntryDeadLettered(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	var decodeErrs []observer.Event
	b, err := bus.Open(ctx, node.URL(), bus.WithObserver(observer.Func(func(_ context.Context, e observer.Event) {
		if e.Scope == observer.ScopeDecode {
			mu.Lock()
			decodeErrs = append(decodeErrs, e)
			mu.Unlock()
		}
	})))
	require.NoError(t, err, "open by URL")
	defer b.Close(context.Background())

	handled := make(chan *bus.Delivery, 4)
	sub, err := b.Subscribe(ctx, "foreign", func(_ context.Context, d *bus.Delivery) error {
		handled <- d
		return nil
	}, bus.WithGroup("g"), bus.WithDeadLetter("foreign.dlq"))
	require.NoError(t, err)
	defer sub.Close(context.Background())
	dead := make(chan *bus.Delivery, 4)
	dsub, err := b.Subscribe(ctx, "foreign.dlq", func(_ context.Context, d *bus.Delivery) error {
		dead <- d
		return nil
	}, bus.WithGroup("inspect"))
	require.NoError(t, err)
	defer dsub.Close(context.Background())

	c, err := amqp.Dial(node.URL())
	require.NoError(t, err)
	defer c.Close()
	ch, err := c.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.PublishWithContext(ctx, "bus.t.foreign", "", false, false, amqp.Publishing{MessageId: "legacy-1", Body: []byte("from elsewhere")}))
	require.NoError(t, b.Publish(ctx, "foreign", &bus.Message{ID: "ours", Payload: []byte("fine")}))

	select {
	case d := <-dead:
		assert.Equal(t, "legacy-1", d.ID, "the copy keeps the AMQP message ID")
		assert.Equal(t, "from elsewhere", string(d.Payload))
		assert.Equal(t, string(backend.CodeMalformed), d.Headers[backend.HeaderDeadLetterCode])
	case <-ctx.Done():
		t.Fatal("no dead letter for the malformed entry")
	}
	select {
	case d := <-handled:
		assert.Equal(t, "ours", d.ID, "only the bus's own message reaches the handler")
	case <-ctx.Done():
		t.Fatal("the well-formed message was not handled")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, decodeErrs, 1, "the malformed entry is reported once")
	assert.True(t, strings.Contains(decodeErrs[0].Err.Error(), "legacy-1"), "the report names the entry")
}

// testLongNamesAreHashed subscribes a group whose queue name would pass
// AMQP's 255 bytes: the queue is named by a hash and messages flow.
func testLongNamesAreHashed(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, node.URL())
	require.NoError(t, err)
	defer b.Close(context.Background())
	topic := strings.Repeat("t", backend.MaxTopicLen)
	got := make(chan string, 1)
	sub, err := b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		got <- string(d.Payload)
		return nil
	}, bus.WithGroup(strings.Repeat("g", 100)), bus.WithDeadLetter("long.dlq"))
	require.NoError(t, err, "subscribe with a 200-byte topic and a 100-byte group")
	defer sub.Close(context.Background())
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{Payload: []byte("long")}))
	select {
	case p := <-got:
		assert.Equal(t, "long", p)
	case <-ctx.Done():
		t.Fatal("nothing delivered on the hashed queue")
	}
}

// testPrefetchFollowsMaxInFlight checks at the broker that a member is
// never pushed more unsettled messages than its MaxInFlight: with 3 in
// flight and 10 published, the queue holds 7 ready and 3 unacked, and
// each ack lets one more through.
func testPrefetchFollowsMaxInFlight(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, err := url.Parse(node.URL())
	require.NoError(t, err)
	be, err := rabbitmq.OpenURL(ctx, u)
	require.NoError(t, err)
	defer be.Close()
	sub, err := be.Subscribe(ctx, "prefetch", backend.SubscribeConfig{Group: "g", AckTimeout: time.Minute, MaxInFlight: 3, MaxDeliveries: 5, Observer: observer.Nop()})
	require.NoError(t, err)
	defer sub.Close()
	msgs := make([]*backend.Message, 10)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: "m" + strconv.Itoa(i), Payload: []byte("x"), PublishedAt: time.Now()}
	}
	require.NoError(t, be.Publish(ctx, "prefetch", msgs))
	got, err := sub.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, got, 1, "one message asked for, one returned")
	first := got[0].AckID

	counts := func() string {
		out, err := node.Ctl("list_queues", "-q", "--no-table-headers", "name", "messages_ready", "messages_unacknowledged")
		require.NoError(t, err, out)
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "bus.q.prefetch/g" {
				return f[1] + " ready, " + f[2] + " unacked"
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return counts() == "7 ready, 3 unacked" }, 20*time.Second, 100*time.Millisecond,
		"the broker pushes MaxInFlight and no more (now %s)", counts())
	require.NoError(t, sub.Ack(ctx, []backend.AckID{first}))
	require.Eventually(t, func() bool { return counts() == "6 ready, 3 unacked" }, 20*time.Second, 100*time.Millisecond,
		"an ack lets one more through (now %s)", counts())
}

// testDeliverAtReachesLaterGroups publishes a message with a DeliverAt
// 1.5 s ahead to a topic no group reads yet, then creates a group: the
// group gets it, not before its DeliverAt, since the message waits at the
// topic, not in the queues of the groups that existed at Publish.
func testDeliverAtReachesLaterGroups(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, node.URL())
	require.NoError(t, err, "open by URL")
	defer b.Close(context.Background())

	at := time.Now().Add(1500 * time.Millisecond)
	m := &bus.Message{Payload: []byte("later"), DeliverAt: at}
	require.NoError(t, b.Publish(ctx, "deliverat-later-group", m))
	handled := make(chan time.Time, 4)
	sub, err := b.Subscribe(ctx, "deliverat-later-group", func(_ context.Context, d *bus.Delivery) error {
		handled <- time.Now()
		return nil
	}, bus.WithGroup("created-after"))
	require.NoError(t, err)
	defer sub.Close(context.Background())
	select {
	case got := <-handled:
		assert.False(t, got.Before(at.Truncate(time.Millisecond)), "handled %v before its DeliverAt", at.Sub(got))
	case <-ctx.Done():
		t.Fatal("a group created after the Publish never got the scheduled message")
	}
}

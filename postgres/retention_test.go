package postgres_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/postgres"
)

// rowsOf counts the rows of topic in bus_messages and their bytes.
func rowsOf(t *testing.T, ctx context.Context, be *postgres.Backend, topic string) (n, bytes int64) {
	t.Helper()
	require.NoError(t, be.Pool().QueryRow(ctx, `SELECT count(*), coalesce(sum(pg_column_size(m.*)), 0) FROM bus_messages m WHERE topic = $1`, topic).Scan(&n, &bytes))
	return n, bytes
}

// publishRows publishes n messages of 200 bytes to topic, 100 a call.
func publishRows(t *testing.T, ctx context.Context, be backend.Backend, topic string, n int) {
	t.Helper()
	for off := 0; off < n; off += 100 {
		msgs := make([]*backend.Message, min(100, n-off))
		for i := range msgs {
			msgs[i] = &backend.Message{ID: fmt.Sprintf("%s-%d", topic, off+i), IDGenerated: true, Payload: make([]byte, 200), PublishedAt: time.Now()}
		}
		require.NoError(t, be.Publish(ctx, topic, msgs))
	}
}

// runTopic returns name made unique to this run, so that runs on one
// server (-count) do not meet each other's messages and groups.
func runTopic(name string) string { return fmt.Sprintf("%s.%d", name, time.Now().UnixNano()) }

// ackIDs returns the AckIDs of msgs.
func ackIDs(msgs []*backend.Message) []backend.AckID {
	ids := make([]backend.AckID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.AckID
	}
	return ids
}

// testPublisherTrimsSettled: a process that only publishes (trim every
// 20ms) deletes what the group settled, while the consumer's own trimmer
// never runs in the test; the unsettled messages stay.
func testPublisherTrimsSettled(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	const n = 500
	topic := runTopic("retention.publisher")
	cons := openBackend(t, ctx, rawURL+"&trim_interval=1h")
	pub := openBackend(t, ctx, rawURL+"&trim_interval=20ms")
	s, err := cons.Subscribe(ctx, topic, groupG)
	require.NoError(t, err)
	defer s.Close()
	publishRows(t, ctx, pub, topic, n)
	ids := ackIDs(receiveN(t, ctx, s, n, 20*time.Second))
	before, bytes := rowsOf(t, ctx, pub, topic)
	require.NoError(t, s.Ack(ctx, ids[:n-20]))
	require.Eventually(t, func() bool { c, _ := rowsOf(t, ctx, pub, topic); return c == 20 }, 20*time.Second, 10*time.Millisecond,
		"the publishing process deletes every settled message and nothing else")
	after, abytes := rowsOf(t, ctx, pub, topic)
	t.Logf("settled by every group: %d rows (%d bytes) before, %d rows (%d bytes) after the publisher's trim", before, bytes, after, abytes)
}

// testCloseTrimsSettled: a consumer that settled everything and closes
// its subscription leaves no message of the topic behind.
func testCloseTrimsSettled(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	const n = 400
	topic := runTopic("retention.close")
	cons := bus.New(openBackend(t, ctx, rawURL+"&trim_interval=1h"))
	defer cons.Close(ctx)
	pub := openBackend(t, ctx, rawURL+"&trim_interval=1h")
	var handled atomic.Int64
	sub, err := cons.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error { handled.Add(1); return nil }, bus.WithStartFrom(bus.StartOldest))
	require.NoError(t, err)
	publishRows(t, ctx, pub, topic, n)
	require.Eventually(t, func() bool { return handled.Load() == n }, 20*time.Second, 5*time.Millisecond, "every message handled")
	before, _ := rowsOf(t, ctx, pub, topic)
	require.NoError(t, sub.Close(ctx))
	after, _ := rowsOf(t, ctx, pub, topic)
	t.Logf("a consumer that settled everything and closed: %d rows before Close, %d after", before, after)
	assert.Equal(t, int64(n), before, "nothing deleted before Close")
	assert.Zero(t, after, "Close deletes what every group settled")
}

// testBoundRetention: a topic with no group and no subscriber stays
// within its length bound, and loses what is past its age bound.
func testBoundRetention(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	be := openBackend(t, ctx, rawURL+"&trim_interval=20ms")
	const bound = 300
	byLen, byAge := runTopic("retention.len"), runTopic("retention.age")
	require.NoError(t, be.BoundRetention(ctx, byLen, backend.RetentionBound{MaxLen: bound}))
	require.NoError(t, be.BoundRetention(ctx, byAge, backend.RetentionBound{MaxAge: 100 * time.Millisecond}))
	publishRows(t, ctx, be, byLen, 3000)
	publishRows(t, ctx, be, byAge, 500)
	require.Eventually(t, func() bool { c, _ := rowsOf(t, ctx, be, byLen); return c == bound }, 20*time.Second, 10*time.Millisecond,
		"a topic with no group keeps its newest %d messages", bound)
	require.Eventually(t, func() bool { c, _ := rowsOf(t, ctx, be, byAge); return c == 0 }, 20*time.Second, 10*time.Millisecond,
		"messages past the age bound are deleted with no group")
	n, bytes := rowsOf(t, ctx, be, byLen)
	t.Logf("3000 published to a topic bounded at %d: %d rows (%d bytes) kept", bound, n, bytes)
}

// testEventsTopicBounded: the lifecycle events topic of a bus stays
// within WithEventsRetention's length with nothing consuming it.
func testEventsTopicBounded(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	be := openBackend(t, ctx, rawURL+"&trim_interval=20ms")
	const bound, n = 20, 2000
	topic, events := runTopic("retention.work"), runTopic("retention.events")
	b := bus.New(be, bus.WithEvents(events), bus.WithEventsRetention(time.Hour, bound))
	defer b.Close(ctx)
	var handled atomic.Int64
	_, err := b.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error { handled.Add(1); return nil }, bus.WithStartFrom(bus.StartOldest))
	require.NoError(t, err)
	for i := range n / 50 {
		msgs := make([]*bus.Message, 50)
		for j := range msgs {
			msgs[j] = &bus.Message{Payload: []byte("x")}
		}
		require.NoError(t, b.Publish(ctx, topic, msgs...))
		require.Eventually(t, func() bool { return handled.Load() == int64(50*(i+1)) }, 20*time.Second, time.Millisecond)
	}
	require.Eventually(t, func() bool { c, _ := rowsOf(t, ctx, be, events); return c > 0 && c <= bound }, 20*time.Second, 10*time.Millisecond,
		"the events topic ends within its bound")
	c, bytes := rowsOf(t, ctx, be, events)
	t.Logf("events topic bounded at %d messages after %d deliveries: %d rows (%d bytes)", bound, n, c, bytes)
}

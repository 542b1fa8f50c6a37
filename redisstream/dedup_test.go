package redisstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/redisstream"
)

// A batch larger than one script call is published in several, each
// message once, and published again it stores nothing; with the window
// off the same IDs are stored again; a message due later waits in the
// schedule and counts there.
func TestLargeBatchesAreDeduplicatedAcrossScriptCalls(t *testing.T) {
	url := redistest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _, client := openBus(t, url, nil)
	topic := uniqueTopic(t)
	batch := make([]*bus.Message, 1000)
	for i := range batch {
		batch[i] = &bus.Message{ID: fmt.Sprintf("m-%d", i), Payload: []byte("x")}
	}
	batch[999].DeliverAt = time.Now().Add(time.Hour)
	require.NoError(t, b.Publish(ctx, topic, batch...))
	require.NoError(t, b.Publish(ctx, topic, batch...), "the second publish of the same IDs succeeds")
	ts, err := b.Topics(ctx)
	require.NoError(t, err)
	var found bool
	for _, ti := range ts {
		if ti.Name == topic {
			found = true
			assert.EqualValues(t, 999, ti.Messages, "each message stored once")
			assert.EqualValues(t, 1, ti.Scheduled, "the delayed one waits in the schedule")
		}
	}
	require.True(t, found, "the topic is listed")

	off, _, _ := openBus(t, url, &redisstream.Options{DedupWindow: -1})
	require.NoError(t, off.Publish(ctx, topic, batch[:10]...))
	n, err := client.XLen(ctx, "bus:{"+topic+"}").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1009, n, "without a window the IDs are stored again")
}

// Messages whose IDs the bus generated are stored without recording their
// IDs (no dedup hash is made for them); a caller-set ID in the same batch
// is recorded, in a hash that expires within two windows, and published
// again it is not stored twice while the generated ones are.
func TestGeneratedIDsAreNotRecorded(t *testing.T) {
	url := redistest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _, client := openBus(t, url, nil)
	topic := uniqueTopic(t)
	stream := "bus:{" + topic + "}"
	ids := []string{stream + "#ids:0", stream + "#ids:1"}

	batch := make([]*bus.Message, 100)
	for i := range batch {
		batch[i] = &bus.Message{Payload: []byte("generated")}
	}
	require.NoError(t, b.Publish(ctx, topic, batch...))
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{Payload: []byte("one")}))
	n, err := client.Exists(ctx, ids...).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no ID was recorded for generated IDs")

	mixed := func() []*bus.Message {
		return []*bus.Message{{Payload: []byte("g")}, {ID: "order-1", Payload: []byte("c")}, {Payload: []byte("g")}}
	}
	require.NoError(t, b.Publish(ctx, topic, mixed()...))
	require.NoError(t, b.Publish(ctx, topic, mixed()...))
	assert.EqualValues(t, 106, client.XLen(ctx, stream).Val(), "every generated ID stored, the caller-set one once")

	var recorded int64
	for _, k := range ids {
		if !client.HExists(ctx, k, "order-1").Val() {
			continue
		}
		recorded++
		assert.EqualValues(t, 2, client.HLen(ctx, k).Val(), "the bucket's stamp and the one caller-set ID")
		ttl := client.PTTL(ctx, k).Val()
		assert.Greater(t, ttl, time.Duration(0), "the hash expires by itself")
		assert.LessOrEqual(t, ttl, 2*redisstream.DefaultDedupWindow, "within two windows")
	}
	assert.EqualValues(t, 1, recorded, "the caller-set ID is recorded in one hash")
}

// A caller-set ID is remembered for at least the window, across the
// boundaries of its time buckets, and forgotten within two windows: a
// publish again that ends less than the window after the first one began
// stores nothing, and one some time after two windows stores the message.
func TestCallerSetIDIsRememberedForTheWindow(t *testing.T) {
	url := redistest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const window = 100 * time.Millisecond
	b, _, client := openBus(t, url, &redisstream.Options{DedupWindow: window})
	topic := uniqueTopic(t)
	stream := "bus:{" + topic + "}"

	type again struct {
		payload string
		within  bool // it ended within the window of the first publish's start
	}
	var agains []again
	for i := range 6 { // several bucket boundaries
		id := fmt.Sprintf("w-%d", i)
		start := time.Now()
		require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: id, Payload: []byte(id + "/0")}))
		for j := 1; time.Since(start) < window+20*time.Millisecond; j++ {
			p := fmt.Sprintf("%s/%d", id, j)
			require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: id, Payload: []byte(p)}))
			agains = append(agains, again{p, time.Since(start) < window})
		}
	}
	entries, err := client.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	stored := map[string]bool{}
	for _, e := range entries {
		stored[e.Values["p"].(string)] = true
	}
	for i := range 6 {
		assert.True(t, stored[fmt.Sprintf("w-%d/0", i)], "the first publish of each ID is stored")
	}
	within := 0
	for _, a := range agains {
		if a.within {
			within++
			assert.False(t, stored[a.payload], "%s was published again within the window and stored", a.payload)
		}
	}
	require.Positive(t, within, "some publishes came within the window")

	start := time.Now()
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "late", Payload: []byte("late/0")}))
	deadline := start.Add(2*window + 2*time.Second)
	for j := 1; ; j++ {
		before := client.XLen(ctx, stream).Val()
		require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "late", Payload: []byte(fmt.Sprint("late/", j))}))
		if client.XLen(ctx, stream).Val() > before {
			assert.GreaterOrEqual(t, time.Since(start), window, "forgotten only after the window")
			break
		}
		require.True(t, time.Now().Before(deadline), "the ID is still remembered %v after its publish (window %v)", time.Since(start), window)
		time.Sleep(5 * time.Millisecond) // pacing the polls, not synchronisation
	}
}

// DeleteTopic deletes the IDs a topic remembers, without a scan of the
// keyspace: the same caller-set ID published after the delete is stored.
func TestDeleteTopicForgetsRecordedIDs(t *testing.T) {
	url := redistest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _, client := openBus(t, url, nil)
	topic := uniqueTopic(t)
	stream := "bus:{" + topic + "}"
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "order-9", Payload: []byte("x")}))
	require.NoError(t, b.DeleteTopic(ctx, topic))
	assert.Zero(t, client.Exists(ctx, stream, stream+"#ids:0", stream+"#ids:1").Val(), "no key of the topic is left")
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "order-9", Payload: []byte("x")}))
	assert.EqualValues(t, 1, client.XLen(ctx, stream).Val(), "the ID was forgotten with the topic")
}

// The publish script adds messages with the stream's trim arguments,
// like the XADDs of generated IDs: under a max length the stream of
// messages with caller-set IDs is trimmed (MAXLEN ~, by whole nodes).
func TestCallerSetIDsAreTrimmedLikeOtherEntries(t *testing.T) {
	url := redistest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _, client := openBus(t, url, &redisstream.Options{Retention: redisstream.RetainMaxLen, MaxLen: 10})
	topic := uniqueTopic(t)
	batch := make([]*bus.Message, 1000)
	for i := range batch {
		batch[i] = &bus.Message{ID: fmt.Sprintf("t-%d", i), Payload: []byte("x")}
	}
	require.NoError(t, b.Publish(ctx, topic, batch...))
	n := client.XLen(ctx, "bus:{"+topic+"}").Val()
	assert.Less(t, n, int64(1000), "the stream was trimmed")
	assert.GreaterOrEqual(t, n, int64(10), "never below the max length")
}
